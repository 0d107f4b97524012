#!/usr/bin/env python3
"""SASS of our sm_90a kernels on a machine without a GPU: the instructions ptxas really emitted.

The CUDA 13 toolkit we build with ships no disassembler here (no cuobjdump / nvdisasm), and
`-Xptxas -v` says nothing of instruction counts. Debian's non-free `nvidia-cuda-toolkit` (11.8)
has an nvdisasm that knows sm_90 (HGMMA, UTMALDG, SYNCS ...); it only refuses CUDA 13's new
cubin ELF header, which `disasm` rewrites (in a copy) to the old form for the same SM. Used to
count what an issue-bound loop costs per iteration and to check that a change to a kernel's
source changed its SASS the way it meant to (kernels/moe/wgmma_rs_gemm.md "Session 56").

  sass.py fetch                       download nvdisasm (about 84 MB .deb, once) into the cache
  sass.py cubin TU OUT [-DNAME=V ...] nvcc TU (relative to the repo root) to an sm_90a cubin
  sass.py disasm CUBIN [OUT]          its SASS as text
  sass.py loops CUBIN [-k RE] [-b]    per kernel: every loop (a backward branch) with its
                                      instruction mix; -b also prints the loop's basic blocks.
                                      Instructions nvdisasm 11.8 cannot decode (CUDA 12+ forms,
                                      e.g. VIADD) count as '?OPC', OPC the encoding's low 12 bits

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


def loops(cubin_path, kernel_re, blocks):
    funcs = parse(disasm(cubin_path))
    fill_gaps(funcs, text_sections(cubin_path))
    for fn, (ins, labels) in funcs.items():
        if kernel_re and not re.search(kernel_re, fn):
            continue
        print("%s: %d instructions" % (fn, len(ins)))
        for a, t in ins:
            m = re.search(r"BRA.*`\((\.L_x_\d+)\)", t)
            if not m or labels.get(m.group(1), a + 1) > a:
                continue
            top = labels[m.group(1)]
            body = [x for x in ins if top <= x[0] <= a]
            print("  loop %#x-%#x: %d instructions: %s" % (top, a, len(body), mix(body)))
            if blocks:
                starts = {top} | {v for v in labels.values() if top < v <= a}
                cur = []
                for x in body:
                    if x[0] in starts and cur:
                        print("    block %#x: %d: %s" % (cur[0][0], len(cur), mix(cur, 10)))
                        cur = []
                    cur.append(x)
                    if "BRA" in x[1] or "EXIT" in x[1]:
                        print("    block %#x: %d: %s" % (cur[0][0], len(cur), mix(cur, 10)))
                        cur = []
                if cur:
                    print("    block %#x: %d: %s" % (cur[0][0], len(cur), mix(cur, 10)))


def main(argv):
    if len(argv) < 2:
        die(__doc__)
    cmd, args = argv[1], argv[2:]
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
    else:
        die(__doc__)


if __name__ == "__main__":
    main(sys.argv)
