#!/usr/bin/python3
"""An independent PyTorch forward pass of a model 'shardmeter export' wrote.

Reads the safetensors file with the standard library (json, struct) and
torch.frombuffer, builds the BlockTrain blocks and the causal LM as
kernels/model.c defines them (DESIGN section 2), and either writes or
compares logits, or generates as 'shardmeter generate' does, with the same
random draws (Philox4x32-10 and the stream keys of kernels/rng.c and
daemon/blocktrain/blocktrain.c).  Needs Debian's python3-torch: run it with
/usr/bin/python3.

  torch_reference.py info MODEL.safetensors
  torch_reference.py logits MODEL.safetensors --model block1
      (--text STR [--masked FROM] | --symbols FILE) [--out FILE]
      [--compare FILE]
  torch_reference.py generate MODEL.safetensors [--mode blocktrain|ar]
      [--length M] [--steps K] [--temperature T] [--seed X] PROMPT

--symbols and --out/--compare files are raw little-endian int32 (n) and
float32 (n x 256) arrays.  Sampling follows kn_cpu_sample (inverse CDF of
one uniform over the softmax at temperature T), computed here in float64:
a byte can differ from ours only when a uniform falls within float32
rounding (about 1e-7) of a class boundary; temperature 0 is argmax.
"""

import argparse
import json
import math
import os
import struct
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit("torch_reference.py: needs PyTorch (Debian: apt-get install "
             "python3-torch; run with /usr/bin/python3)")

VOCAB_OUT = 256
MASK = 256
FORMAT = "shardmeter-safetensors 1"
TAG_GEN, TAG_AR = 3, 4          # daemon/blocktrain/blocktrain.c
M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


def fail(msg):
    sys.exit("torch_reference.py: " + msg)


# The file

def load(path):
    """Tensors (name -> float32 torch tensor) and metadata of path."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        fail("%s: too short for a header length" % path)
    (hlen,) = struct.unpack("<Q", raw[:8])
    if hlen > len(raw) - 8:
        fail("%s: header length %d beyond the file" % (path, hlen))
    header = json.loads(raw[8:8 + hlen].decode("utf-8"))
    data = raw[8 + hlen:]
    meta = header.pop("__metadata__", {})
    if meta.get("format") != FORMAT:
        fail("%s: metadata format %r is not %r" % (path, meta.get("format"),
                                                   FORMAT))
    spans, tensors = [], {}
    for name, e in header.items():
        if e["dtype"] != "F32":
            fail("%s: tensor %s has dtype %s, not F32" % (path, name,
                                                          e["dtype"]))
        b, end = e["data_offsets"]
        numel = math.prod(e["shape"])
        if end - b != 4 * numel:
            fail("%s: tensor %s: offsets and shape disagree" % (path, name))
        spans.append((b, end, name))
        t = torch.frombuffer(bytearray(data[b:end]), dtype=torch.float32)
        if sys.byteorder == "big":
            t = torch.frombuffer(bytearray(data[b:end])[::-1],
                                 dtype=torch.float32).flip(0)
        tensors[name] = t.reshape(e["shape"])
    pos = 0
    for b, end, name in sorted(spans):
        if b != pos:
            fail("%s: tensor %s does not start where the last ended" %
                 (path, name))
        pos = end
    if pos != len(data):
        fail("%s: %d bytes of data belong to no tensor" % (path,
                                                           len(data) - pos))
    models = {m["prefix"]: m for m in json.loads(meta["models"])}
    for m in models.values():
        if m.get("position_block", 0):
            fail("%s: model %s has position blocks of %d: this reference "
                 "implements the full-window blocks and the causal LM only"
                 % (path, m["prefix"], m["position_block"]))
    return tensors, meta, models


# The forward pass (kernels/model.c: kn__model_forward)

def forward(W, m, sym):
    """Logits (n, 256) of one window of symbols for model m."""
    p, d, H, n = m["prefix"], m["width"], m["heads"], m["window"]
    hs = d // H
    idx = torch.tensor(sym, dtype=torch.long)
    x = W[p + ".wte"][idx] + W[p + ".wpe"][:n]
    if m["causal"]:
        allowed = torch.ones(n, n, dtype=torch.bool).tril()
    for l in range(m["layers"]):
        q = "%s.layer%d." % (p, l)
        h = F.layer_norm(x, (d,), W[q + "ln1.weight"], W[q + "ln1.bias"],
                         eps=1e-5)
        qkv = F.linear(h, W[q + "attn.qkv.weight"], W[q + "attn.qkv.bias"])
        qh, kh, vh = (t.reshape(n, H, hs).transpose(0, 1)
                      for t in qkv.split(d, dim=1))
        att = (qh @ kh.transpose(1, 2)) * (1.0 / math.sqrt(hs))
        if m["causal"]:
            att = att.masked_fill(~allowed, float("-inf"))
        y = (att.softmax(dim=-1) @ vh).transpose(0, 1).reshape(n, d)
        x = x + F.linear(y, W[q + "attn.proj.weight"], W[q + "attn.proj.bias"])
        h = F.layer_norm(x, (d,), W[q + "ln2.weight"], W[q + "ln2.bias"],
                         eps=1e-5)
        h = F.gelu(F.linear(h, W[q + "mlp.fc.weight"], W[q + "mlp.fc.bias"]),
                   approximate="tanh")
        x = x + F.linear(h, W[q + "mlp.proj.weight"], W[q + "mlp.proj.bias"])
    x = F.layer_norm(x, (d,), W[p + ".lnf.weight"], W[p + ".lnf.bias"],
                     eps=1e-5)
    return F.linear(x, W[p + ".head.weight"], W[p + ".head.bias"])


# The random draws (kernels/rng.c)

def philox4x32(key, ctr):
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32, \
            ((p0 >> 32) ^ c3 ^ k1) & M32, p0 & M32
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def fill_uniform(n, seed, stream):
    key = (seed & M32, (seed >> 32) & M32)
    out = []
    for i in range(0, n, 4):
        index = i // 4
        w = philox4x32(key, (index & M32, (index >> 32) & M32,
                             stream & M32, (stream >> 32) & M32))
        out.extend((x >> 8) * (1.0 / 16777216.0) for x in w)
    return out[:n]


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def rng_stream(a, b, c, d):
    g = 0x9E3779B97F4A7C15
    h = mix64((a + g) & M64)
    h = mix64(h ^ ((b + g) & M64))
    h = mix64(h ^ ((c + g) & M64))
    return mix64(h ^ ((d + g) & M64))


def sample(logits, u, temp):
    """kn_cpu_sample on one row: argmax at temp <= 0, else the first class
    whose cumulative probability exceeds u."""
    if temp <= 0:
        return int(torch.argmax(logits).item())
    p = torch.softmax(logits.double() / temp, dim=0).tolist()
    cum = 0.0
    for c, pc in enumerate(p):
        cum += pc
        if u < cum:
            return c
    return max(c for c in range(len(p)) if p[c] > 0.0)


# Generation (daemon/blocktrain/blocktrain.c: bt_denoise_block, bt_generate_ar)

def lround(x):
    r = math.floor(x)
    return r + 1 if x - r >= 0.5 else r


def steps_of(cuts, k, b):
    return max(1, lround(k * (cuts[b + 1] - cuts[b])))


def time_of(cuts, k, b, j):
    lo, hi = cuts[b], cuts[b + 1]
    count = steps_of(cuts, k, b)
    return lo if j >= count else hi - (hi - lo) * j / count


def denoise(W, models, cuts, seq, fixed, k, temp, seed):
    n = len(seq)
    for b in range(len(cuts) - 2, -1, -1):
        m = models["block%d" % (b + 1)]
        for j in range(steps_of(cuts, k, b)):
            t, nxt = time_of(cuts, k, b, j), time_of(cuts, k, b, j + 1)
            p = (t - nxt) / t
            u = fill_uniform(2 * n, seed, rng_stream(TAG_GEN, b, j, 0))
            pos = [i for i in range(fixed, n) if seq[i] == MASK and
                   (nxt <= 0.0 or u[i] < p)]
            if not pos:
                continue
            logits = forward(W, m, seq)
            for i in pos:
                seq[i] = sample(logits[i], u[n + i], temp)
    return seq


def generate_ar(W, m, seq, fixed, end, temp, seed):
    n = len(seq)
    for pos in range(fixed, end):
        u = fill_uniform(n, seed, rng_stream(TAG_AR, pos, 0, 0))[pos - 1]
        logits = forward(W, m, seq)
        seq[pos] = sample(logits[pos - 1], u, temp)
    return seq


# Commands

def cmd_info(a):
    W, meta, models = load(a.file)
    print("run %s, cuts %s" % (meta["run_id"], meta["cuts"]))
    for p, m in models.items():
        params = sum(t.numel() for name, t in W.items()
                     if name.startswith(p + "."))
        print("%-8s %s layers %d width %d heads %d window %d step %d: "
              "%d parameters" % (p, "causal" if m["causal"] else
                                 "bidirectional", m["layers"], m["width"],
                                 m["heads"], m["window"], m["step"], params))


def read_raw(path, fmt):
    with open(path, "rb") as f:
        raw = f.read()
    return list(struct.unpack("<%d%s" % (len(raw) // 4, fmt), raw))


def cmd_logits(a):
    W, meta, models = load(a.file)
    if a.model not in models:
        fail("no model %s in %s (it has %s)" % (a.model, a.file,
                                                 ", ".join(models)))
    m = models[a.model]
    n = m["window"]
    if a.symbols:
        sym = read_raw(a.symbols, "i")
    else:
        text = os.fsencode(a.text or "")
        sym = list(text[:n]) + [MASK] * (n - min(len(text), n))
        if a.masked is not None:
            sym[a.masked:] = [MASK] * (n - a.masked)
    if len(sym) != n or not all(0 <= s <= MASK for s in sym):
        fail("the input must be %d symbols from 0 to 256" % n)
    with torch.no_grad():
        logits = forward(W, m, sym)
    flat = logits.reshape(-1).tolist()
    if a.out:
        with open(a.out, "wb") as f:
            f.write(struct.pack("<%df" % len(flat), *flat))
    if a.compare:
        ours = read_raw(a.compare, "f")
        if len(ours) != len(flat):
            fail("%s holds %d floats, not %d" % (a.compare, len(ours),
                                                  len(flat)))
        diff = max(abs(x - y) for x, y in zip(flat, ours))
        print("max |logit difference| %.3g over %d logits" % (diff,
                                                               len(flat)))
    if not a.out and not a.compare:
        best = logits.argmax(dim=1).tolist()
        print("argmax per position:", bytes(best).decode("latin-1"))


def cmd_generate(a):
    W, meta, models = load(a.file)
    cuts = json.loads(meta["cuts"])
    prompt = os.fsencode(a.prompt)
    key = "causal" if a.mode == "ar" else "block1"
    if key not in models:
        fail("no %s model in %s" % (key, a.file))
    n = models[key]["window"]
    length = n - len(prompt) if a.length is None else a.length
    if length < 1 or len(prompt) + length > n:
        fail("the prompt (%d bytes) and the output (%d) must fit the window "
             "of %d bytes" % (len(prompt), length, n))
    seq = list(prompt) + [MASK] * (n - len(prompt))
    with torch.no_grad():
        if a.mode == "ar":
            if not prompt:
                fail("--mode ar needs a prompt of at least one byte")
            generate_ar(W, models["causal"], seq, len(prompt),
                        len(prompt) + length, a.temperature, a.seed)
        else:
            denoise(W, models, cuts, seq, len(prompt), a.steps,
                    a.temperature, a.seed)
    out = bytes(ord("_") if s == MASK else s for s in seq[:len(prompt) +
                                                           length])
    sys.stdout.buffer.write(out + b"\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("info", help="list the models in the file")
    p.add_argument("file")
    p = sub.add_parser("logits", help="one window's logits")
    p.add_argument("file")
    p.add_argument("--model", default="block1")
    p.add_argument("--text")
    p.add_argument("--masked", type=int,
                   help="mask every position from this one on")
    p.add_argument("--symbols", help="raw int32 symbols, one window")
    p.add_argument("--out", help="write the logits, raw float32")
    p.add_argument("--compare", help="raw float32 logits to compare with")
    p = sub.add_parser("generate", help="as 'shardmeter generate'")
    p.add_argument("file")
    p.add_argument("prompt")
    p.add_argument("--mode", choices=["blocktrain", "ar"],
                   default="blocktrain")
    p.add_argument("--length", type=int)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(1)
    {"info": cmd_info, "logits": cmd_logits,
     "generate": cmd_generate}[a.cmd](a)


if __name__ == "__main__":
    main()
