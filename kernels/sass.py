#!/usr/bin/env python3
"""SASS of our sm_90a kernels on a machine without a GPU: the instructions ptxas really emitted.

The CUDA 13 toolkit we build with ships no disassembler here (no cuobjdump / nvdisasm), and
`-Xptxas -v` says nothing of instruction counts. Debian's non-free `nvidia-cuda-toolkit` (11.8)
has an nvdisasm that knows sm_90 (HGMMA, UTMALDG, SYNCS ...); it only refuses CUDA 13's new
cubin ELF header, which `disasm` rewrites (in a copy) to the old form for the same SM. Used to
count what an issue-bound loop costs per iteration and to check that a change to a kernel's
source changed its SASS the way it meant to (kernels/moe/wgmma_rs_gemm_sessions.md "Session 56").

  sass.py fetch                       download nvdisasm (about 84 MB .deb, once) into the cache
  sass.py cubin TU OUT [-DNAME=V ...] nvcc TU (relative to the repo root) to an sm_90a cubin
  sass.py disasm CUBIN [OUT]          its SASS as text
  sass.py loops CUBIN [-k RE] [-b]    per kernel: every loop (a backward branch) with its
                                      instruction mix; -b also prints the loop's basic blocks.
                                      Instructions nvdisasm 11.8 cannot decode (CUDA 12+ forms,
                                      e.g. VIADD) count as '?OPC', OPC the encoding's low 12 bits
  sass.py same OLD NEW [-k RE]        whether two cubins' kernels are byte-identical (.text
                                      sections; exit 1 if one differs or is missing): a refactor
                                      that must not change the machine code, checked without a
                                      GPU and without nvdisasm
  sass.py stalls CUBIN CSV[.xz] [-k RE]
                                      Nsight's stall samples per basic block and loop, from an
                                      `ncu --page source --csv --print-source sass` export of a
                                      run of the same build (one section per profiled kernel)

Cache: $FS_SASS_CACHE or ~/.cache/flashserve/sass. No network except `fetch` (apt, Debian's
mirror as configured; the non-free component is added for this download only).
"""
import collections
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("FS_SASS_CACHE", os.path.expanduser("~/.cache/flashserve/sass"))
NVDISASM = os.path.join(CACHE, "nvdisasm")


def die(msg):
    sys.exit("sass.py: " + msg)


def fetch():
    if os.path.exists(NVDISASM):
        print(NVDISASM)
        return
    os.makedirs(CACHE, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "nonfree.sources")
        with open(src, "w") as f:
            f.write("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n"
                    "Components: non-free\n"
                    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
        lists = os.path.join(tmp, "lists")
        os.makedirs(os.path.join(lists, "partial"))
        opts = ["-o", "Dir::Etc::sourcelist=" + src, "-o", "Dir::Etc::sourceparts=-",
                "-o", "Dir::State::lists=" + lists, "-o", "Dir::Cache=" + tmp,
                "-o", "Debug::NoLocking=1"]
        if os.geteuid() == 0:
            opts += ["-o", "APT::Sandbox::User=root"]
        subprocess.run(["apt-get", "-q", "update"] + opts, check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "-q", "download", "nvidia-cuda-toolkit"] + opts, check=True,
                       cwd=tmp, stdout=subprocess.DEVNULL)
        debs = [f for f in os.listdir(tmp) if f.endswith(".deb")]
        if not debs:
            die("apt-get download left no .deb")
        ex = os.path.join(tmp, "x")
        subprocess.run(["dpkg-deb", "-x", os.path.join(tmp, debs[0]), ex], check=True)
        shutil.copy(os.path.join(ex, "usr", "bin", "nvdisasm"), NVDISASM)
    print(NVDISASM)


def cubin(tu, out, defines):
    nvcc = os.environ.get("NVCC", "nvcc")
    build = os.environ.get("FS_BUILD_DIR", os.path.join(ROOT, "build-static"))
    cmd = [nvcc, "-I" + ROOT, "-I" + build, "-O3", "-DNDEBUG", "-arch=sm_90a", "-std=c++17",
           "--expt-relaxed-constexpr", "-Werror=all-warnings"] + defines + \
          ["-x", "cu", "-cubin", os.path.join(ROOT, tu), "-o", out]
    subprocess.run(cmd, check=True)


def disasm(path):
    if not os.path.exists(NVDISASM):
        die("no nvdisasm in %s: run `sass.py fetch` first" % CACHE)
    data = bytearray(open(path, "rb").read())
    if data[:4] != b"\x7fELF":
        die(path + " is not an ELF cubin")
    if data[7] == 0x41:  # CUDA 13's header: e_flags bits 8..15 hold the SM
        sm = (struct.unpack_from("<I", data, 0x30)[0] >> 8) & 0xFF
        data[7], data[8] = 0x33, 7
        # old form: SM, texmode unified + 64-bit addresses, virtual SM
        struct.pack_into("<I", data, 0x30, sm | 0x500 | (sm << 16))
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(data)
        f.flush()
        return subprocess.run([NVDISASM, "-c", f.name], check=True, capture_output=True,
                              text=True).stdout


def text_sections(path):
    """{section name: bytes} of a cubin's .text.* sections."""
    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = heads[shstrndx]
    out = {}
    for name_off, _, _, _, off, size in heads:
        end = data.index(b"\0", strtab[4] + name_off)
        name = data[strtab[4] + name_off:end].decode()
        if name.startswith(".text."):
            out[name[len(".text."):]] = data[off:off + size]
    return out


def fill_gaps(funcs, sections):
    """nvdisasm 11.8 silently drops instructions it cannot decode (CUDA 12+ forms such as VIADD):
    put them back as '?OPC' with the encoding's low 12 bits, so that counts stay whole."""
    for fn, (ins, _) in funcs.items():
        code = sections.get(fn)
        if code is None:
            continue
        have = {a for a, _ in ins}
        for a in range(0, len(code), 16):
            if a not in have:
                lo, = struct.unpack_from("<Q", code, a)
                ins.append((a, "?%03x" % (lo & 0xFFF)))
        ins.sort()


def parse(text):
    """{kernel: (instructions [(address, text)], labels {name: address})}."""
    funcs = collections.OrderedDict()
    fn, pending = None, []
    for line in text.splitlines():
        m = re.match(r"^\.text\.(\S+):", line)
        if m:
            fn, pending = m.group(1), []
            funcs[fn] = ([], {})
            continue
        m = re.match(r"^(\.L_x_\d+):", line)
        if m:
            pending.append(m.group(1))
            continue
        m = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(.*?)\s*;", line)
        if m and fn:
            a = int(m.group(1), 16)
            funcs[fn][0].append((a, m.group(2)))
            for p in pending:
                funcs[fn][1][p] = a
            pending = []
    return funcs


def opcode(text):
    return re.sub(r"^@!?U?P[T\d]+\s+", "", text).split()[0].split(".")[0]


def mix(body, top=16):
    c = collections.Counter(opcode(t) for _, t in body)
    return ", ".join("%s %d" % kv for kv in c.most_common(top))


def basic_blocks(ins, labels, lo=0, hi=1 << 62):
    """The function's basic blocks within [lo, hi]: split at labels and after branches / exits."""
    starts = {v for v in labels.values() if lo <= v <= hi} | {lo}
    out, cur = [], []
    for x in ins:
        if not lo <= x[0] <= hi:
            continue
        if x[0] in starts and cur:
            out.append(cur)
            cur = []
        cur.append(x)
        if "BRA" in x[1] or "EXIT" in x[1] or "BRX" in x[1]:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def loop_ranges(ins, labels):
    """(top, bottom) of every backward branch."""
    out = []
    for a, t in ins:
        m = re.search(r"BRA.*`\((\.L_x_\d+)\)", t)
        if m and labels.get(m.group(1), a + 1) <= a:
            out.append((labels[m.group(1)], a))
    return out


def functions(cubin_path):
    funcs = parse(disasm(cubin_path))
    fill_gaps(funcs, text_sections(cubin_path))
    return funcs


def loops(cubin_path, kernel_re, blocks):
    for fn, (ins, labels) in functions(cubin_path).items():
        if kernel_re and not re.search(kernel_re, fn):
            continue
        print("%s: %d instructions" % (fn, len(ins)))
        for top, bottom in loop_ranges(ins, labels):
            body = [x for x in ins if top <= x[0] <= bottom]
            print("  loop %#x-%#x: %d instructions: %s" % (top, bottom, len(body), mix(body)))
            if blocks:
                for b in basic_blocks(ins, labels, top, bottom):
                    print("    block %#x: %d: %s" % (b[0][0], len(b), mix(b, 10)))


def read_source_csv(path):
    """Sections of an `ncu --page source --csv --print-source sass` export: a list of row lists,
    each row {"addr": int, "sass": str, "samples": float, "executed": float}. A new section
    starts at each header row (one per profiled kernel)."""
    import csv
    sections, cols = [], None
    opener = open
    if path.endswith(".xz"):
        import lzma
        opener = lzma.open
    with opener(path, "rt", newline="") as f:
        for row in csv.reader(f):
            if any("Address" in c for c in row) and any("Sampl" in c for c in row):
                find = lambda key: next((i for i, c in enumerate(row) if key in c), None)
                cols = {"addr": find("Address"), "sass": find("Source"),
                        "samples": find("Warp Stall Sampling (All"),
                        "executed": find("Instructions Executed")}
                if cols["samples"] is None:
                    cols["samples"] = find("Sampl")
                sections.append([])
                continue
            if cols is None or len(row) <= max(v for v in cols.values() if v is not None):
                continue
            try:
                addr = int(row[cols["addr"]], 0)
            except ValueError:
                continue
            num = lambda k: float(row[cols[k]].replace(",", "") or 0) if cols[k] is not None else 0.0
            sections[-1].append({"addr": addr, "sass": row[cols["sass"]] if cols["sass"] is not None
                                 else "", "samples": num("samples"), "executed": num("executed")})
    return sections


def stalls(cubin_path, csv_path, kernel_re, top_n=25):
    """Stall samples per basic block and loop: each CSV section matched to the cubin function
    whose opcodes agree at the most addresses (the same build must have been profiled)."""
    funcs = functions(cubin_path)
    for si, rows in enumerate(read_source_csv(csv_path)):
        if not rows:
            continue
        base = min(r["addr"] for r in rows)
        for r in rows:
            r["off"] = r["addr"] - base if base > 1 << 20 else r["addr"]
        best, best_score = None, -1
        for fn, (ins, labels) in funcs.items():
            if kernel_re and not re.search(kernel_re, fn):
                continue
            at = dict(ins)
            score = sum(1 for r in rows if r["sass"] and r["off"] in at and
                        opcode(at[r["off"]]) == opcode(r["sass"] + " "))
            if score > best_score:
                best, best_score = fn, score
        if best is None:
            continue
        ins, labels = funcs[best]
        samples = collections.defaultdict(float)
        for r in rows:
            samples[r["off"]] += r["samples"]
        total = sum(samples.values()) or 1.0
        print("section %d: %s (%d of %d rows matched), %d samples" %
              (si, best, best_score, len(rows), total))
        blocks = basic_blocks(ins, labels)
        ranked = sorted(blocks, key=lambda b: -sum(samples[a] for a, _ in b))
        for b in ranked[:top_n]:
            n = sum(samples[a] for a, _ in b)
            hot = max(b, key=lambda x: samples[x[0]])
            print("  block %#x: %d instr, %5.1f %% of samples; hottest %#x %s: %s" %
                  (b[0][0], len(b), 100 * n / total, hot[0], hot[1][:40], mix(b, 8)))
        for top, bottom in loop_ranges(ins, labels):
            n = sum(v for a, v in samples.items() if top <= a <= bottom)
            if n >= 0.02 * total:
                print("  loop %#x-%#x: %5.1f %% of samples" % (top, bottom, 100 * n / total))


def same(old_path, new_path, kernel_re):
    a, b = text_sections(old_path), text_sections(new_path)
    names = sorted(n for n in set(a) | set(b) if not kernel_re or re.search(kernel_re, n))
    differ = [n for n in names if a.get(n) != b.get(n)]
    for n in differ:
        what = "missing" if n not in a or n not in b else "%d / %d bytes" % (len(a[n]), len(b[n]))
        print("differs: %s (%s)" % (n, what))
    print("%d of %d kernels byte-identical" % (len(names) - len(differ), len(names)))
    return not differ


def main(argv):
    if len(argv) < 2:
        die(__doc__)
    cmd, args = argv[1], argv[2:]
    if "-k" in args and args.index("-k") + 1 >= len(args):
        die("-k needs a regular expression")
    if cmd == "fetch":
        fetch()
    elif cmd == "cubin" and len(args) >= 2:
        cubin(args[0], args[1], args[2:])
    elif cmd == "disasm" and args:
        text = disasm(args[0])
        if len(args) > 1:
            open(args[1], "w").write(text)
        else:
            sys.stdout.write(text)
    elif cmd == "loops" and args:
        kernel_re = args[args.index("-k") + 1] if "-k" in args else None
        loops(args[0], kernel_re, "-b" in args)
    elif cmd == "same" and len(args) >= 2:
        kernel_re = args[args.index("-k") + 1] if "-k" in args else None
        sys.exit(0 if same(args[0], args[1], kernel_re) else 1)
    elif cmd == "stalls" and len(args) >= 2:
        kernel_re = args[args.index("-k") + 1] if "-k" in args else None
        stalls(args[0], args[1], kernel_re)
    else:
        die(__doc__)


if __name__ == "__main__":
    main(sys.argv)
