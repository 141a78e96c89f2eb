#!/usr/bin/env python3
# The measuring half of scripts/bench/plan: `poll` watches one
# configuration's daemons over mutual TLS (their /v1/status) until every
# one is done, keeping when each step and state was first seen; `report`
# sets each configuration's measurements (the median of its trials,
# DIR/t1, DIR/t2, ...) beside the plan's predictions (DIR/plan.json), and
# the inference latency measured over a configuration's ring (every
# trial's serve/latency) beside the plan's for that ring.
import http.client
import json
import math
import os
import ssl
import statistics
import sys
import time


def connect(addr, ident):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    # the testbed's own daemons: their ids are in the peer list the bench
    # wrote, and nothing but this machine can reach the namespaces
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(ident + "/cert.pem", ident + "/key.pem")
    host, port = addr.rsplit(":", 1)
    return http.client.HTTPSConnection(host, int(port), context=ctx,
                                       timeout=5)


def status(conns, addr, ident):
    for attempt in (0, 1):
        try:
            if addr not in conns:
                conns[addr] = connect(addr, ident)
            conns[addr].request("GET", "/v1/status")
            r = conns[addr].getresponse()
            body = r.read()
            if r.status == 200:
                return json.loads(body)
        except (OSError, http.client.HTTPException, ValueError):
            pass
        conns.pop(addr, None)
    return None


POLL_S = 1.0


def poll(peers, ident, out, limit):
    """Polls every POLL_S; writes out (JSON): per daemon the first time each
    step was seen, when training started and ended, and its last status
    (whose training_s and round_times time the run by the daemon's clock:
    at 0.2 s the polls took 10 % of a host held to 10 % of a core)."""
    addrs = [l.split()[0] for l in open(peers)
             if l.strip() and not l.startswith(("#", "client "))]
    conns, seen = {}, {a: {"steps": {}, "start": None, "done": None,
                           "last": None, "error": None, "began": None,
                           "training_s": None} for a in addrs}
    t0 = time.time()
    while time.time() - t0 < limit:
        for a in addrs:
            s = seen[a]
            if s["done"] is not None:
                continue
            st = status(conns, a, ident)
            now = time.time()
            if st is None:
                continue
            s["last"] = st
            # the daemon's own clock (status training_s): when it began
            # training, to within the request's time (the earliest
            # estimate is the closest), and how long it took
            took = st.get("training_s")
            if took is not None:
                s["training_s"] = took
                if s["began"] is None or now - took < s["began"]:
                    s["began"] = now - took
            step, state = st.get("step", 0), st.get("state", "")
            if state == "error":
                s["error"] = st.get("error", "error")
                s["done"] = now
            if s["start"] is None and state in ("training", "round"):
                s["start"] = now
            s["steps"].setdefault(str(step), now)
            if state == "done":
                s["done"] = now
        if all(seen[a]["done"] is not None for a in addrs):
            break
        time.sleep(POLL_S)
    # the final counters, once every daemon is done
    for a in addrs:
        st = status(conns, a, ident)
        if st is not None:
            seen[a]["last"] = st
    json.dump({"poll_s": POLL_S, "daemons": seen}, open(out, "w"))
    return 0 if all(seen[a]["done"] and not seen[a]["error"]
                    for a in addrs) else 1


def rel_err(pred, meas):
    return abs(pred - meas) / meas if meas > 0 else float("nan")


def ranks(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = math.sqrt(sum((x - ma) ** 2 for x in ra) *
                    sum((y - mb) ** 2 for y in rb))
    return num / den if den > 0 else float("nan")


def measure(cfg):
    """One configuration's measurements from its poll and peer list."""
    spec = {}
    sec = ""
    for line in open(cfg + "/spec.conf"):
        line = line.split("#")[0].strip()
        if line.startswith("["):
            sec = line.strip("[]").strip()
        elif "=" in line:
            k, v = (x.strip() for x in line.split("=", 1))
            spec[sec + "." + k] = v
    steps, H = int(spec["optim.steps"]), int(spec["sync.local_steps"])
    pos = int(spec["optim.batch"]) * int(spec["model.window"])
    poll = json.load(open(cfg + "/poll.json"))["daemons"]
    blocks = {}
    for l in open(cfg + "/peers"):
        f = l.split()
        if len(f) >= 2 and not l.startswith(("#", "client ")):
            blocks.setdefault(int(f[1]), []).append(f[0])
    m = {"blocks": {}, "links": {}}
    for b, addrs in sorted(blocks.items()):
        ds = [poll[a] for a in addrs]
        if any(d["start"] is None or d["done"] is None or d["error"]
               for d in ds):
            return None
        # from when the block's last replica began training to when its
        # last was done, by the daemons' clocks where they report them
        # (the poll's first sight of a daemon came up to 25 steps late):
        # a replicated block trains from when all its hosts are up, as
        # a block of one from when its host is; the start-up before
        # (up to 1.2 s for a host at 10 % of a core) is in no plan
        start = max(d["began"] if d.get("began") is not None else
                    d["start"] for d in ds)
        done = max(d["began"] + d["training_s"]
                   if d.get("began") is not None else d["done"]
                   for d in ds)
        # round k ends when every replica has gone past step k * H (the
        # last when the block is done): by the daemons' round_times, else
        # the poll's first sight of a later step; the first includes
        # start-up
        ends = [start]
        for k in range(1, steps // H + 1):
            if k * H >= steps:
                ends.append(done)
                continue
            ts = []
            for d in ds:
                rt = ((d["last"] or {}).get("round_times") or {})
                own = rt.get("s") or []
                if (d.get("began") is not None and rt.get("first") == 0
                        and len(own) >= k):
                    ts.append(d["began"] + own[k - 1])
                    continue
                t = [v for s, v in d["steps"].items() if int(s) > k * H]
                ts.append(min(t) if t else done)
            ends.append(max(ts))
        periods = [y - x for x, y in zip(ends, ends[1:])]
        rs = statistics.median(periods[1:] if len(periods) > 1 else periods)
        m["blocks"][b] = {"train_s": done - start, "round_s": rs,
                          "positions": steps * len(addrs) * pos,
                          "hosts": addrs}
    m["train_s"] = max(v["train_s"] for v in m["blocks"].values())
    m["positions_per_s"] = sum(v["positions"] / v["train_s"]
                               for v in m["blocks"].values())
    for a, d in poll.items():
        for p in (d["last"] or {}).get("peers", []):
            if p.get("self"):
                continue
            n = p["bytes"]["out"].get("update", 0)
            if n:
                m["links"][(a, p["addr"])] = n
    return m


def trials(cfg):
    """cfg's trial directories, in order."""
    ts = [n for n in os.listdir(cfg) if n[:1] == "t" and n[1:].isdigit()]
    return [cfg + "/" + n for n in sorted(ts, key=lambda n: int(n[1:]))]


def median_of(ms):
    """One measurement from the trials' (those that finished): each
    figure the median of its trials', with the trials' own times kept."""
    ms = [m for m in ms if m is not None]
    if not ms:
        return None
    med = statistics.median
    agg = {"train_s": med(m["train_s"] for m in ms),
           "positions_per_s": med(m["positions_per_s"] for m in ms),
           "trials_s": [m["train_s"] for m in ms], "blocks": {},
           "links": {}}
    for b, v in ms[0]["blocks"].items():
        agg["blocks"][b] = {
            "train_s": med(m["blocks"][b]["train_s"] for m in ms),
            "round_s": med(m["blocks"][b]["round_s"] for m in ms),
            "positions": v["positions"], "hosts": v["hosts"]}
    for key in set().union(*(m["links"] for m in ms)):
        agg["links"][key] = med(m["links"].get(key, 0) for m in ms)
    return agg


def cpu_split(cfg):
    """Per host (hN), the median over cfg's trials of the CPU seconds of
    its training (the ended trainer, bt-trainer, and the compute pool's
    kn-pool-N) and of the rest (the loop: start-up, TLS, HTTP, the
    exchange's bytes), from the trials' cpu.hN files."""
    got = {}
    for t in trials(cfg):
        for n in sorted(os.listdir(t)):
            if not n.startswith("cpu.h"):
                continue
            total = rest = None
            for line in open(t + "/" + n):
                f = line.split()
                if len(f) != 2:
                    continue
                if f[0] == "total":
                    total = float(f[1])
                elif f[0] != "bt-trainer" and not f[0].startswith("kn-pool-"):
                    rest = (rest or 0.0) + float(f[1])
            if total is not None and rest is not None:
                got.setdefault(n[4:], []).append((total - rest, rest))
    return {h: (statistics.median(x[0] for x in v),
                statistics.median(x[1] for x in v))
            for h, v in sorted(got.items())}


def predicted(cfg):
    j = json.load(open(cfg + "/plan.json"))
    k = j.get("written", j["chosen"])
    if k == 0:
        return j["default"], 0
    for c in j["candidates"]:
        if c["rank"] == k:
            return c, k
    raise SystemExit("plan.json of %s has no row %d" % (cfg, k))


def serve_latency(cfg):
    """The predicted inference latency of cfg's ring and the measured
    ones of every trial (seconds, the warm-ups left out), or None when
    not measured.  Every trial plans the same ring."""
    p, meas = None, []
    for t in trials(cfg):
        path = t + "/serve/latency"
        if not os.path.exists(path):
            continue
        ms = [float(l) / 1e3 for l in open(path)
              if l.strip() and not l.startswith("warm-up")]
        if ms:
            meas.append(ms)
        if p is None:
            p, _ = predicted(t + "/serve")
    if not meas or p is None or "serve" not in p:
        return None
    return p["serve"], meas


def name_map(topology):
    t = json.load(open(topology))
    return {h["name"]: h.get("address", h["name"]) for h in t["hosts"]}


def report(out, names, skipped):
    addr = name_map(out + "/topology.json")
    rows, errs, serves = [], [], []
    print("\n%-8s %-32s %10s %10s %6s %9s %9s %6s %11s %11s %6s"
          " %12s %12s %6s" % ("config", "options", "pred time", "meas time",
                              "err", "pred rnd", "meas rnd", "err",
                              "pred pos/s", "meas pos/s", "err",
                              "pred bytes", "meas bytes", "err"))
    for name in names:
        cfg = out + "/" + name
        p, k = predicted(cfg)
        m = median_of([measure(t) for t in trials(cfg)
                       if os.path.exists(t + "/poll.json")])
        o = p["options"]
        opts = "R%d H%d %s%s st%d %s" % (
            o["replicas"], o["local_steps"], o["encoding"],
            "+zstd" if o["zstd"] else "", o["streams"],
            "ovl" if o["overlap"] else "blk")
        if m is None:
            print("%-8s %-32s %10.1f %10s   (no measurement: see "
                  "%s/t*/log.*)" % (name, opts, p["train_s"], "-", cfg))
            continue
        slow = p["slowest_block"]
        pr = p["blocks"][slow - 1]["round_s"]
        mr = m["blocks"][slow]["round_s"]
        # a link carries its block's updates for that block's time
        blk_s = {}
        for bp in p["blocks"]:
            for h in bp["hosts"]:
                blk_s[h] = bp["train_s"]
        pb = sum(l["bytes_per_hour"] * blk_s[l["from"]] / 3600
                 for l in p["links"])
        mb = sum(m["links"].values())
        e = [rel_err(p["train_s"], m["train_s"]), rel_err(pr, mr),
             rel_err(p["positions_per_s"], m["positions_per_s"])]
        eb = rel_err(pb, mb) if mb > 0 or pb > 0 else None
        if pb == 0 and mb == 0:
            eb = None
        elif mb == 0:
            eb = float("inf")
        errs += e + ([eb] if eb is not None else [])
        print("%-8s %-32s %10.2f %10.2f %5.1f%% %9.2f %9.2f %5.1f%% %11.0f"
              " %11.0f %5.1f%% %12.0f %12.0f %6s" % (
                  name, opts, p["train_s"], m["train_s"], 100 * e[0], pr, mr,
                  100 * e[1], p["positions_per_s"], m["positions_per_s"],
                  100 * e[2], pb, mb,
                  "-" if eb is None else "%.1f%%" % (100 * eb)))
        print("    time in each of %d trial(s): %s s" % (
            len(m["trials_s"]), " ".join("%.2f" % x for x in m["trials_s"])))
        cpu = cpu_split(cfg)
        if cpu:
            print("    CPU s, trainer + rest: " + "; ".join(
                "%s %.2f + %.2f" % (h, tr, re) for h, (tr, re) in
                cpu.items()))
        for b, bp in enumerate(p["blocks"], 1):
            mbk = m["blocks"][b]
            print("    block %d on %s: round %.2f s pred, %.2f s meas; time "
                  "%.2f s pred, %.2f s meas" % (
                      b, ",".join(mbk["hosts"]), bp["round_s"],
                      mbk["round_s"], bp["train_s"], mbk["train_s"]))
        for l in p["links"]:
            key = (addr.get(l["from"], l["from"]), addr.get(l["to"], l["to"]))
            want = l["bytes_per_hour"] * blk_s[l["from"]] / 3600
            got = m["links"].get(key, 0)
            print("    link %s -> %s: %.0f bytes pred, %d meas (%s)" % (
                key[0], key[1], want, got,
                "%.1f%%" % (100 * rel_err(want, got)) if got else "-"))
        rows.append((name, k, p["train_s"], m["train_s"]))
        sv = serve_latency(cfg)
        if sv is not None:
            ps, meas = sv
            bt = ps["blocktrain"]
            med_s = statistics.median(x for ms in meas for x in ms)
            e_s = rel_err(bt["latency_s"], med_s)
            errs.append(e_s)
            serves.append((name, bt["latency_s"], med_s, e_s))
            print("    inference over %s, %d steps: %.1f ms pred (compute "
                  "%.1f, network %.1f), %.1f ms meas (median of %d; "
                  "trials' medians %s), %.1f%%" % (
                      " -> ".join(addr.get(h, h) for h in ps["ring"]),
                      ps["denoising_steps"], 1e3 * bt["latency_s"],
                      1e3 * bt["breakdown"]["compute"],
                      1e3 * (bt["breakdown"]["transfer"] +
                             bt["breakdown"]["latency"]),
                      1e3 * med_s, sum(len(ms) for ms in meas),
                      " ".join("%.1f" % (1e3 * statistics.median(ms))
                               for ms in meas),
                      100 * e_s))
    for s in skipped:
        print("skipped: " + s)
    errs = [e for e in errs if e == e]
    byname = {r[0]: r for r in rows}
    rho = spearman([r[2] for r in rows], [r[3] for r in rows]) \
        if len(rows) >= 3 else float("nan")
    print("\nrank correlation (Spearman) of predicted and measured time over "
          "%d configurations: %.3f" % (len(rows), rho))
    speed = float("nan")
    first = [r for r in rows if r[0] == "first"]
    if "default" in byname and first:
        speed = byname["default"][3] / first[0][3]
        print("first choice: %.2f s to the spec's work against the "
              "default's %.2f s (predicted %.2fx, measured %.2fx)" % (
                  first[0][3], byname["default"][3],
                  byname["default"][2] / first[0][2], speed))
    for name, pl, ml, el in serves:
        print("inference latency, %s: %.1f ms predicted, %.1f ms measured "
              "(%.1f%%)" % (name, 1e3 * pl, 1e3 * ml, 100 * el))
    med = statistics.median(errs) if errs else float("nan")
    mx = max(errs) if errs else float("nan")
    print("median_error=%.3f max_error=%.3f speedup_vs_default=%.2f" % (
        med, mx, speed))
    return 0


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "poll" and len(sys.argv) == 6:
        return poll(sys.argv[2], sys.argv[3], sys.argv[4],
                    float(sys.argv[5]))
    if len(sys.argv) >= 3 and sys.argv[1] == "report":
        names, skipped = [], []
        for a in sys.argv[3:]:
            (skipped if a.startswith("skip:") else names).append(
                a[5:] if a.startswith("skip:") else a)
        return report(sys.argv[2], names, skipped)
    sys.stderr.write("usage: plan_report.py poll PEERS IDENTITY OUT SECONDS\n"
                     "       plan_report.py report DIR CONFIG... "
                     "[skip:WHY...]\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
