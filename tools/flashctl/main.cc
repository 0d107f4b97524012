// flashctl: the FlashServe operator CLI. Parses the command line (CLI11) and dispatches to one
// function per command (commands/*.cc).
#include <CLI/CLI.hpp>

#include <iostream>

#include "tools/flashctl/commands/cache_commands.h"
#include "tools/flashctl/commands/commands.h"
#include "tools/flashctl/commands/tokenizer_commands.h"

int main(int argc, char** argv) {
  using namespace flashserve::flashctl;
  CLI::App app{"flashctl: inspect and manage a FlashServe deployment"};
  app.require_subcommand(1);

  CLI::App* checkpoint = app.add_subcommand("checkpoint", "inspect model checkpoints and configs");
  checkpoint->require_subcommand(1);
  CheckpointInspectOptions inspect;
  CLI::App* inspect_cmd = checkpoint->add_subcommand(
      "inspect", "config summary, layer schedule, parameter counts, KV bytes per token");
  inspect_cmd->add_option("path", inspect.path, "checkpoint directory or config.json")->required();
  inspect_cmd->add_flag("--json", inspect.json, "print JSON instead of tables");

  TokenizeOptions tokenize;
  CLI::App* tokenize_cmd = app.add_subcommand("tokenize", "encode text with a tokenizer.json");
  tokenize_cmd->add_option("--tokenizer", tokenize.tokenizer, "tokenizer.json or its directory")
      ->required();
  auto* text_opt = tokenize_cmd->add_option("--text", tokenize.text, "text to encode");
  auto* stdin_opt = tokenize_cmd->add_flag("--stdin", tokenize.read_stdin, "encode standard input");
  text_opt->excludes(stdin_opt);
  tokenize_cmd->add_flag("--json", tokenize.json, "print {\"ids\": [...], \"tokens\": [...]}");

  DetokenizeOptions detokenize;
  CLI::App* detokenize_cmd = app.add_subcommand("detokenize", "decode token ids to text");
  detokenize_cmd->add_option("--tokenizer", detokenize.tokenizer, "tokenizer.json or its directory")
      ->required();
  detokenize_cmd->add_option("--ids", detokenize.ids, "ids: \"1,2,3\", \"1 2 3\" or \"[1, 2, 3]\"")
      ->required();
  detokenize_cmd->add_flag("--skip-special", detokenize.skip_special, "drop special tokens");

  // ---- flashctl cache ... (commands/cache_*.cc) ----
  CLI::App* cache_cmd = app.add_subcommand("cache", "inspect and manage a cache server");
  cache_cmd->require_subcommand(1);
  auto add_cache_connection = [](CLI::App* cmd, CacheConnectionOptions& o) {
    cmd->add_option("--address", o.address, "cache server HOST:PORT (gRPC)")->capture_default_str();
    cmd->add_option("--token", o.token, "admin token (default: $FLASHSERVE_ADMIN_TOKEN)");
    cmd->add_option("--timeout", o.timeout_s, "deadline of each call, seconds")
        ->capture_default_str();
    cmd->add_flag("--json", o.json, "print JSON instead of tables");
  };
  CacheStatsOptions cache_stats;
  CLI::App* cache_stats_cmd =
      cache_cmd->add_subcommand("stats", "per-tier statistics and usage per model");
  add_cache_connection(cache_stats_cmd, cache_stats.conn);

  CacheLsOptions cache_ls;
  CLI::App* cache_ls_cmd = cache_cmd->add_subcommand("ls", "list entries (blocks, then snapshots)");
  add_cache_connection(cache_ls_cmd, cache_ls.conn);
  cache_ls_cmd->add_option("--kind", cache_ls.kind, "block, swa or all")
      ->check(CLI::IsMember({"block", "swa", "all"}));
  cache_ls_cmd->add_option("--fingerprint", cache_ls.fingerprint, "model fingerprint (64 hex)");
  cache_ls_cmd->add_option("--pinned", cache_ls.pinned, "yes, no or any")
      ->check(CLI::IsMember({"yes", "no", "any"}));
  cache_ls_cmd->add_option("--limit", cache_ls.limit, "entries per page")->capture_default_str();
  cache_ls_cmd->add_option("--page-token", cache_ls.page_token, "continue a listing");
  cache_ls_cmd->add_flag("--all", cache_ls.all, "follow every page");

  CacheInspectOptions cache_inspect;
  CLI::App* cache_inspect_cmd =
      cache_cmd->add_subcommand("inspect", "one entry's metadata and value header");
  add_cache_connection(cache_inspect_cmd, cache_inspect.conn);
  cache_inspect_cmd->add_option("key", cache_inspect.key, "entry key (64 hex)")->required();
  cache_inspect_cmd->add_option("--kind", cache_inspect.kind, "block or swa")
      ->check(CLI::IsMember({"block", "swa"}));
  cache_inspect_cmd->add_flag("--verify", cache_inspect.verify,
                              "read the value and check its checksum");

  CacheLookupOptions cache_lookup;
  CLI::App* cache_lookup_cmd =
      cache_cmd->add_subcommand("lookup", "what the cache holds for a prompt, block by block");
  add_cache_connection(cache_lookup_cmd, cache_lookup.conn);
  auto* lookup_tokens_opt =
      cache_lookup_cmd->add_option("--tokens", cache_lookup.tokens, "ids: \"1,2,3\" or \"1 2 3\"");
  auto* lookup_text_opt =
      cache_lookup_cmd->add_option("--text", cache_lookup.text, "prompt text (with --tokenizer)");
  lookup_tokens_opt->excludes(lookup_text_opt);
  cache_lookup_cmd->add_option("--tokenizer", cache_lookup.tokenizer,
                               "tokenizer.json or its directory");
  cache_lookup_cmd->add_option("--fingerprint", cache_lookup.fingerprint,
                               "model fingerprint (64 hex)")
      ->required();
  cache_lookup_cmd->add_option("--salt", cache_lookup.salt, "tenant salt");

  CacheEvictOptions cache_evict;
  CLI::App* cache_evict_cmd = cache_cmd->add_subcommand("evict", "remove entries now");
  add_cache_connection(cache_evict_cmd, cache_evict.conn);
  cache_evict_cmd->add_option("keys", cache_evict.keys, "entry keys (64 hex each)")->required();
  cache_evict_cmd->add_option("--kind", cache_evict.kind, "block or swa")
      ->check(CLI::IsMember({"block", "swa"}));
  cache_evict_cmd->add_flag("--force", cache_evict.force, "evict pinned blocks too");

  CachePinOptions cache_pin;
  CLI::App* cache_pin_cmd = cache_cmd->add_subcommand("pin", "exempt blocks from eviction");
  add_cache_connection(cache_pin_cmd, cache_pin.conn);
  cache_pin_cmd->add_option("keys", cache_pin.keys, "block keys (64 hex each)")->required();
  CachePinOptions cache_unpin;
  CLI::App* cache_unpin_cmd = cache_cmd->add_subcommand("unpin", "make blocks evictable again");
  add_cache_connection(cache_unpin_cmd, cache_unpin.conn);
  cache_unpin_cmd->add_option("keys", cache_unpin.keys, "block keys (64 hex each)")->required();

  CacheFlushOptions cache_flush;
  CLI::App* cache_flush_cmd = cache_cmd->add_subcommand("flush", "remove every matching entry");
  add_cache_connection(cache_flush_cmd, cache_flush.conn);
  auto* flush_fp_opt =
      cache_flush_cmd->add_option("--fingerprint", cache_flush.fingerprint, "one model (64 hex)");
  auto* flush_all_opt = cache_flush_cmd->add_flag("--all", cache_flush.all, "every model");
  flush_fp_opt->excludes(flush_all_opt);
  cache_flush_cmd->add_option("--kind", cache_flush.kind, "block, swa or all")
      ->check(CLI::IsMember({"block", "swa", "all"}));
  cache_flush_cmd->add_flag("--include-pinned", cache_flush.include_pinned,
                            "remove pinned blocks too");
  cache_flush_cmd->add_flag("--dry-run", cache_flush.dry_run, "count only");

  CacheVerifyOptions cache_verify;
  CLI::App* cache_verify_cmd =
      cache_cmd->add_subcommand("verify", "read every block and check its checksums");
  add_cache_connection(cache_verify_cmd, cache_verify.conn);
  cache_verify_cmd->add_option("--fingerprint", cache_verify.fingerprint, "one model (64 hex)");
  cache_verify_cmd->add_option("--budget", cache_verify.budget, "check at most N blocks; 0 = all");
  cache_verify_cmd->add_option("--page", cache_verify.page, "blocks per call")
      ->capture_default_str();
  cache_verify_cmd->add_flag("--evict", cache_verify.evict_corrupt, "remove corrupt blocks");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (inspect_cmd->parsed()) return RunCheckpointInspect(inspect);
  if (tokenize_cmd->parsed()) {
    if (!tokenize.read_stdin && text_opt->count() == 0) {
      std::cerr << "flashctl tokenize: give --text TEXT or --stdin\n";
      return 2;
    }
    return RunTokenize(tokenize);
  }
  if (detokenize_cmd->parsed()) return RunDetokenize(detokenize);
  if (cache_stats_cmd->parsed()) return RunCacheStats(cache_stats);
  if (cache_ls_cmd->parsed()) return RunCacheLs(cache_ls);
  if (cache_inspect_cmd->parsed()) return RunCacheInspect(cache_inspect);
  if (cache_lookup_cmd->parsed()) return RunCacheLookup(cache_lookup);
  if (cache_evict_cmd->parsed()) return RunCacheEvict(cache_evict);
  if (cache_pin_cmd->parsed()) return RunCachePin(cache_pin);
  if (cache_unpin_cmd->parsed()) return RunCacheUnpin(cache_unpin);
  if (cache_flush_cmd->parsed()) return RunCacheFlush(cache_flush);
  if (cache_verify_cmd->parsed()) return RunCacheVerify(cache_verify);
  return 2;
}
