#!/usr/bin/env python3
"""Turns one benchmark run (tools/bench/run) into its result file.

Reads the load generator's JSON lines, adds the machine's description,
derives the figures and ratios the benchmark reports (mcpsub / kernel
ceiling, reads / read ceiling, mcpsub / TypeScript SDK peer) and checks them against the goals,
writes everything as one JSON document, prints the summary as Markdown
tables, and, with --plots DIR, renders latency.png and fanout.png with
gnuplot. Rows of the PostgreSQL group (tagged "group": "pg", each with its
"store") are summarized apart, SQLite and PostgreSQL side by side, under
summary.postgres; they judge no goal. Exits 1 when any scenario failed: a run that lost events has no
figures, only its error.
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

GOALS = {
    "fanout_per_cpu": 1_000_000,   # notifications per server CPU-second
    "fanout_vs_ceiling": 0.70,     # fraction of the kernel ceiling
    "p99_ms": {100: 1.0, 1000: 1.0, 10000: 5.0},
    "p99_vs_ceiling": 1.1,         # the heavy latency rows: p99 over the kernel ceiling's, at most
    "idle_bytes": 2048,            # server memory per idle session
    "reads_per_worker": 50_000,
    "reads_vs_ceiling": 0.70,      # fraction of the read ceiling, per server CPU-second
    "auth_cost": {"fanout": 0.10, "read": 0.20},  # throughput lost to authentication, at most
    "filtered_vs_collection": 0.95,  # distinct filtered subscriptions / collection ones, per CPU-s
    "mixed_vs_collection": 0.90,     # the same with one session of two other URIs among them
    "beside_vs_collection": 0.90,    # ...or with one of them holding another URI beside it
    "subscribes_per_worker": 20_000,  # per second, one worker's share
    "subscribe_flat": 0.8,  # subscribes/s at 10,000 held over at 1, at least
    "writes_vs_raw": 0.80,  # REST PUTs per second over raw SQLite inserts (one row a transaction)
}


def machine(fd_limit):
    info = {"nproc": os.cpu_count(), "kernel": platform.release(), "fd_limit": fd_limit}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return info


def by(runs, **want):
    return [r for r in runs if all(r.get(k) == v for k, v in want.items())]


def median(rows, key):
    vals = sorted(r[key] for r in rows if r and r.get(key) is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def ratio(a, b):
    return round(a / b, 3) if a and b else None


def summarize(runs):
    s = {"fanout": [], "latency": [], "idle": [], "read": [], "write": [], "storm": [], "listen": [], "auth": [],
         "filters": [], "subscribe": [], "match": [], "goals": []}
    ok = [r for r in runs if r.get("ok")]
    # Fan-out: each mcpsub run is followed by the ceiling at the same size and
    # batching; repeated runs are summarized by their medians.
    groups = {}
    for i, r in enumerate(runs):
        if r.get("scenario") != "fanout" or r.get("label") != "mcpsub" or not r.get("ok"):
            continue
        ceil = next((c for c in runs[i + 1:i + 2] if c.get("label") == "ceiling" and c.get("ok")
                     and c.get("sessions") == r["sessions"]), None)
        groups.setdefault((r["sessions"], r["writers"]), []).append((r, ceil))
    for (sessions, writers), pairs in groups.items():
        ms = [m for m, _ in pairs]
        cs = [c for _, c in pairs if c]
        peer = next(iter(by(ok, scenario="fanout", label="peer", sessions=sessions)), None) if writers > 1 else None
        m_cpu, c_cpu = median(ms, "per_server_cpu_s"), median(cs, "per_server_cpu_s")
        m_wall, c_wall = median(ms, "per_wall_s"), median(cs, "per_wall_s")
        pair_ratios = [ratio(m.get("per_server_cpu_s"), c.get("per_server_cpu_s")) for m, c in pairs if c]
        pair_ratios = [x for x in pair_ratios if x is not None]
        s["fanout"].append({
            "sessions": sessions, "writers": writers, "events": ms[0]["events"], "runs": len(ms),
            "frames_per_segment": median(ms, "frames_per_segment"),
            "mcpsub_per_cpu_s": m_cpu, "mcpsub_per_wall_s": m_wall,
            "ceiling_batch": cs[0].get("batch") if cs else None,
            "ceiling_per_cpu_s": c_cpu, "ceiling_per_wall_s": c_wall,
            "vs_ceiling_cpu": ratio(m_cpu, c_cpu), "vs_ceiling_wall": ratio(m_wall, c_wall),
            "vs_ceiling_cpu_range": [min(pair_ratios), max(pair_ratios)] if pair_ratios else None,
            "peer_per_cpu_s": peer and peer.get("per_server_cpu_s"),
            "peer_per_wall_s": peer and peer.get("per_wall_s"),
            "vs_peer_cpu": ratio(m_cpu, peer and peer.get("per_server_cpu_s")),
            "server_cpu_s": median(ms, "server_cpu_s"), "wall_s": median(ms, "wall_s"),
            "loadgen_cpu_s": median(ms, "loadgen_measured_cpu_s"),
        })
    # Listen streams (2026-07-28) against GET streams (2025) at the same size, same scenario.
    for r in ok:
        if r.get("label") != "listen":
            continue
        row = {"scenario": r["scenario"], "sessions": r["sessions"], "listen_per_cpu_s": r.get("per_server_cpu_s"),
               "listen_per_wall_s": r.get("per_wall_s"), "listen_p99_ms": None, "get_p99_ms": None,
               "get_per_cpu_s": None}
        if r["scenario"] == "fanout":
            gets = [g for g in by(ok, scenario="fanout", label="mcpsub", sessions=r["sessions"]) if g.get("writers") == r.get("writers")]
            row["get_per_cpu_s"] = median(gets, "per_server_cpu_s")
        else:
            row["listen_p99_ms"] = round(r["p99_us"] / 1000, 3)
            gets = [g for g in by(ok, scenario="latency", label="mcpsub", sessions=r["sessions"]) if g.get("writer") == "rest"]
            row["get_p99_ms"] = round(gets[0]["p99_us"] / 1000, 3) if gets else None
        s["listen"].append(row)
    for r in by(ok, scenario="latency"):
        if r["label"] == "listen":
            continue
        s["latency"].append({
            "system": r["label"], "writer": r["writer"], "sessions": r["sessions"], "rate": r["rate"],
            "samples": r.get("samples"),
            "p50_ms": round(r["p50_us"] / 1000, 3), "p99_ms": round(r["p99_us"] / 1000, 3),
            "p999_ms": round(r["p999_us"] / 1000, 3), "max_ms": round(r["max_us"] / 1000, 3),
            "server_cpu_s": r.get("server_cpu_s"), "wall_s": r.get("wall_s"),
        })
    for r in by(ok, scenario="idle"):
        s["idle"].append({k: r.get(k) for k in (
            "sessions", "subscriptions_per_session", "server_rss_per_session", "kernel_tcp_mem_per_session",
            "kernel_socket_slab_per_session", "sockets_used_delta", "server_rss_before", "server_rss_after")})
    # Reads: each repetition runs the read ceiling (bench_read_ceiling, by the same load
    # generator) in as many processes as each worker count mcpsubd ran with; its medians go
    # beside every system's of that count (one process beside the peer), and mcpsub's i-th run
    # of each count pairs with the ceiling's i-th for the spread of the ratio. Results from
    # before the ceiling had processes have one ceiling, for every count.
    reads = {}
    all_ceil = [r for r in by(ok, scenario="read") if r["label"] == "ceiling"]
    for r in by(ok, scenario="read"):
        if not r["label"].startswith("auth-") and r["label"] != "ceiling":
            reads.setdefault((r["label"], r["workers"]), []).append(r)
    for (system, workers), rs in reads.items():
        ceil_reads = [c for c in all_ceil if c.get("workers") == workers] or all_ceil
        c_cpu, c_wall = median(ceil_reads, "per_server_cpu_s"), median(ceil_reads, "per_wall_s")
        cpu, wall = median(rs, "per_server_cpu_s"), median(rs, "per_wall_s")
        pair_ratios = [ratio(m.get("per_server_cpu_s"), c.get("per_server_cpu_s"))
                       for m, c in zip(rs, ceil_reads)] if system == "mcpsub" else []
        pair_ratios = [x for x in pair_ratios if x is not None]
        s["read"].append({"system": system, "connections": rs[0]["connections"], "workers": workers, "runs": len(rs),
                          "per_wall_s": wall, "per_worker_wall_s": median(rs, "per_worker_wall_s"),
                          "per_server_cpu_s": cpu,
                          "server_cpu_s": median(rs, "server_cpu_s"),
                          "worker_slots": min((r.get("read_slots") or 0 for r in rs), default=0),
                          "ceiling_runs": len(ceil_reads),
                          "ceiling_per_server_cpu_s": c_cpu, "ceiling_per_wall_s": c_wall,
                          "ceiling_response_bytes": ceil_reads[0].get("response_bytes") if ceil_reads else None,
                          "vs_ceiling_cpu": ratio(cpu, c_cpu), "vs_ceiling_wall": ratio(wall, c_wall),
                          "vs_ceiling_cpu_range": [min(pair_ratios), max(pair_ratios)] if pair_ratios else None})
    # Writes: REST PUTs and put_record tool calls on 1, 8 and 64 connections against the raw
    # insert loop (the PostgreSQL group's runs, which name their store, are reported there).
    raw = [r for r in by(ok, scenario="sqlwrite") if r.get("store") is None]
    raw_s = raw[0]["per_wall_s"] if raw else None
    for r in sorted((r for r in by(ok, scenario="write") if r.get("store") is None),
                    key=lambda r: (r.get("writer", "rest") != "rest", r.get("connections", 0))):
        s["write"].append({"writer": r.get("writer", "rest"), "connections": r.get("connections"),
                           "per_s": r["per_wall_s"], "per_server_cpu_s": r.get("per_server_cpu_s"),
                           "raw_inserts_per_s": raw_s, "vs_raw": ratio(r["per_wall_s"], raw_s)})
    for r in by(ok, scenario="storm"):
        s["storm"].append({k: r.get(k) for k in (
            "sessions", "dropped", "behind", "gap_keys", "rate", "catchup_p50_s", "catchup_all_s",
            "recovered_updates", "reread_updates", "baseline_p50_us", "baseline_p99_us", "storm_p50_us",
            "storm_p99_us", "storm_p999_us", "server_cpu_s", "storm_wall_s")})
    # Authentication: each mode against the same scenario without it (medians of interleaved runs).
    for scenario in ("fanout", "read"):
        modes = {}
        for r in ok:
            if r.get("scenario") == scenario and r.get("label", "").startswith("auth-"):
                modes.setdefault(r["label"][5:], []).append(r)
        off = median(modes.get("off", []), "per_server_cpu_s")
        for mode, rs in modes.items():
            cpu = median(rs, "per_server_cpu_s")
            s["auth"].append({"scenario": scenario, "mode": mode, "runs": len(rs), "per_server_cpu_s": cpu,
                              "per_wall_s": median(rs, "per_wall_s"),
                              "cost": round(1 - cpu / off, 3) if cpu and off and mode != "off" else None})
    # Filtered subscriptions against collection ones (medians of interleaved runs).
    # One row per number of sessions.
    filter_runs = [r for r in ok if r.get("scenario") == "fanout" and r.get("label", "").startswith("filters-")]
    for n in sorted({r["sessions"] for r in filter_runs}):
        kinds = {k: [r for r in filter_runs if r["sessions"] == n and r["label"] == f"filters-{k}"]
                 for k in ("collection", "filtered", "mixed", "beside", "both")}
        if not (kinds["collection"] and kinds["filtered"]):
            continue
        col, fil, mix, bes, both = (median(kinds[k], "per_server_cpu_s") if kinds[k] else None
                                    for k in ("collection", "filtered", "mixed", "beside", "both"))
        # The server's user time a notification: the per-topic work alone, without the kernel's
        # cost of the writes, which moves with how many frames a segment carries (Caveats).
        for k in ("collection", "filtered"):
            for r in kinds[k]:
                if r.get("server_user_s") is not None and r.get("notifications"):
                    r["user_ns"] = r["server_user_s"] * 1e9 / r["notifications"]
        col_user, fil_user = median(kinds["collection"], "user_ns"), median(kinds["filtered"], "user_ns")
        s["filters"].append({"sessions": n, "runs": len(kinds["filtered"]),
                             "collection_per_cpu_s": col, "filtered_per_cpu_s": fil,
                             "filtered_vs_collection": ratio(fil, col),
                             "collection_user_ns": col_user, "filtered_user_ns": fil_user,
                             "mixed_per_cpu_s": mix, "mixed_vs_collection": ratio(mix, col),
                             "beside_per_cpu_s": bes, "beside_vs_collection": ratio(bes, col),
                             "both_per_cpu_s": both, "both_vs_collection": ratio(both, col)})
    # Subscribe: the cost of one more subscription at each number held.
    # (one connection: one client's subscribes in turn; more: in flight together, group-committed)
    # Repeated runs are summarized by their medians.
    subs = {}
    for r in by(ok, scenario="subscribe"):
        subs.setdefault((r.get("connections", 1), r.get("held", 0)), []).append(r)
    for (conns, held), rs in sorted(subs.items()):
        wall = median(rs, "per_wall_s")
        s["subscribe"].append({"held": held, "connections": conns, "runs": len(rs), "per_wall_s": wall,
                               "per_wall_s_range": [min(r["per_wall_s"] for r in rs), max(r["per_wall_s"] for r in rs)],
                               "per_server_cpu_s": median(rs, "per_server_cpu_s"),
                               "ms_per_subscribe": round(1000 / wall, 3) if wall else None})
    # Match: bench_match's ns per change, by kind of topic and number of topics.
    for r in by(ok, scenario="match"):
        s["match"].append({k: r.get(k) for k in ("kind", "topics", "changes", "ns_per_change", "matched_per_change")})
    # Goals.
    g = s["goals"]
    # Subscribes per second per worker: its throughput, with subscribes in flight together.
    widest = max((row["connections"] for row in s["subscribe"]), default=1)
    for row in s["subscribe"]:
        if row["connections"] != widest:
            continue
        g.append(goal(f"subscribes per second, {row['held']} held, {row['connections']} connections", ">= 20,000",
                      row["per_wall_s"], (row["per_wall_s"] or 0) >= GOALS["subscribes_per_worker"]))
    for conns in sorted({row["connections"] for row in s["subscribe"]}):
        rows = [row for row in s["subscribe"] if row["connections"] == conns]
        if len(rows) < 2:
            continue
        first, last = rows[0], rows[-1]
        flat = ratio(last["per_wall_s"], first["per_wall_s"])
        g.append(goal(f"subscribe cost flat ({conns} connections): {last['held']} held / {first['held']} held",
                      ">= 0.8", flat, flat is not None and flat >= GOALS["subscribe_flat"]))
    for w in s["write"]:
        r = w["vs_raw"]
        what = "REST PUTs" if w["writer"] == "rest" else "put_record tool calls"
        g.append(goal(f"{what} / raw SQLite inserts, {w['connections']} connection{'' if w['connections'] == 1 else 's'}", f">= {GOALS['writes_vs_raw']}",
                      r, r is not None and r >= GOALS["writes_vs_raw"]))
    for f in s["filters"]:
        r = f["filtered_vs_collection"]
        g.append(goal(f"fan-out per CPU-s, {f['sessions']} distinct filtered URIs / collection subscriptions",
                      f">= {GOALS['filtered_vs_collection']}", r, r is not None and r >= GOALS["filtered_vs_collection"]))
        r = f["mixed_vs_collection"]
        if f["mixed_per_cpu_s"] is not None:
            g.append(goal("fan-out per CPU-s, one session of two other URIs among collection subscriptions / collection alone",
                          f">= {GOALS['mixed_vs_collection']}", r, r is not None and r >= GOALS["mixed_vs_collection"]))
        r = f.get("beside_vs_collection")
        if f.get("beside_per_cpu_s") is not None:
            g.append(goal("fan-out per CPU-s, one session of the collection and another URI among collection subscriptions / collection alone",
                          f">= {GOALS['beside_vs_collection']}", r, r is not None and r >= GOALS["beside_vs_collection"]))
    for a in s["auth"]:
        if a["cost"] is not None:
            lim = GOALS["auth_cost"][a["scenario"]]
            g.append(goal(f"cost of authentication ({a['mode']}) on {a['scenario']}", f"<= {lim:.0%}",
                          a["cost"], a["cost"] <= lim))
    for f in s["fanout"]:
        if f["writers"] > 1:
            g.append(goal(f"fan-out per server CPU-second, {f['sessions']} sessions", ">= 1,000,000",
                          f["mcpsub_per_cpu_s"], f["mcpsub_per_cpu_s"] and f["mcpsub_per_cpu_s"] >= GOALS["fanout_per_cpu"]))
            g.append(goal(f"fan-out / kernel ceiling (CPU), {f['sessions']} sessions", ">= 0.70",
                          f["vs_ceiling_cpu"], f["vs_ceiling_cpu"] is not None and f["vs_ceiling_cpu"] >= GOALS["fanout_vs_ceiling"]))
    for l in s["latency"]:
        if l["system"] == "mcpsub" and l["sessions"] in GOALS["p99_ms"]:
            lim = GOALS["p99_ms"][l["sessions"]]
            g.append(goal(f"p99 commit -> notification, {l['sessions']} sessions, {l['writer']} writer",
                          f"<= {lim} ms", l["p99_ms"], l["p99_ms"] <= lim))
        # The heavy rows, where the load generator bounds any server: against the ceiling's p99.
        ceil = next((c for c in s["latency"] if c["system"] == "ceiling" and c["sessions"] == l["sessions"]
                     and c["rate"] == l["rate"]), None)
        if l["system"] == "mcpsub" and l["sessions"] >= 1000 and ceil and ceil["p99_ms"]:
            r = round(l["p99_ms"] / ceil["p99_ms"], 2)
            g.append(goal(f"p99 commit -> notification / the kernel ceiling's, {l['sessions']} sessions, "
                          f"{l['writer']} writer", f"<= {GOALS['p99_vs_ceiling']}x", r, r <= GOALS["p99_vs_ceiling"]))
    for i in s["idle"]:
        g.append(goal(f"server memory per idle session ({i['sessions']} sessions)", "<= 2048 B",
                      i["server_rss_per_session"], i["server_rss_per_session"] <= GOALS["idle_bytes"]))
    for r in s["read"]:
        if r["system"] == "mcpsub":
            n = f"{r['workers']} worker{'s' if r['workers'] != 1 else ''}"
            g.append(goal(f"reads per second per worker ({n})", ">= 50,000", r["per_worker_wall_s"],
                          r["per_worker_wall_s"] >= GOALS["reads_per_worker"]))
            g.append(goal(f"reads per server CPU-second ({n})", ">= 50,000", r["per_server_cpu_s"],
                          (r["per_server_cpu_s"] or 0) >= GOALS["reads_per_worker"]))
            if r["ceiling_runs"]:
                g.append(goal(f"reads / read ceiling per server CPU-second ({n})", f">= {GOALS['reads_vs_ceiling']:.2f}",
                              r["vs_ceiling_cpu"],
                              r["vs_ceiling_cpu"] is not None and r["vs_ceiling_cpu"] >= GOALS["reads_vs_ceiling"]))
    return s


def summarize_pg(runs, cluster):
    """The PostgreSQL group: each figure on SQLite and on PostgreSQL, same sizes, interleaved."""
    ok = [r for r in runs if r.get("ok")]
    stores = ("sqlite", "postgres")
    out = {"cluster": cluster, "fanout": [], "latency": [], "write": [], "raw": [], "read": [], "page": []}

    def ms(v):
        return round(v / 1000, 3) if v is not None else None

    # Fan-out: each mcpsub run is followed by the kernel ceiling batched as that run was.
    pairs = {}
    for i, r in enumerate(runs):
        if r.get("scenario") != "fanout" or r.get("label") != "mcpsub" or not r.get("ok"):
            continue
        ceil = next((c for c in runs[i + 1:i + 2] if c.get("label") == "ceiling" and c.get("ok")
                     and c.get("sessions") == r["sessions"]), None)
        pairs.setdefault((r["sessions"], r["writers"]), {}).setdefault(r.get("store"), []).append((r, ceil))
    for (sessions, writers), by_store in sorted(pairs.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        row = {"sessions": sessions, "writers": writers}
        for st in stores:
            ps = by_store.get(st, [])
            m = [a for a, _ in ps]
            c = [b for _, b in ps if b]
            cpu, c_cpu = median(m, "per_server_cpu_s"), median(c, "per_server_cpu_s")
            row[st] = {"runs": len(m), "events": m[0]["events"] if m else None,
                       "frames_per_segment": median(m, "frames_per_segment"),
                       "per_server_cpu_s": cpu, "per_wall_s": median(m, "per_wall_s"),
                       # PostgreSQL's own processes (the whole cluster) are measured apart.
                       "store_cpu_s": median(m, "store_cpu_s"),
                       "per_total_cpu_s": median(m, "per_total_cpu_s") if st == "postgres" else cpu,
                       "ceiling_per_cpu_s": c_cpu, "vs_ceiling_cpu": ratio(cpu, c_cpu),
                       "vs_ceiling_wall": ratio(median(m, "per_wall_s"), median(c, "per_wall_s"))}
        row["postgres_vs_sqlite_wall"] = ratio(row["postgres"]["per_wall_s"], row["sqlite"]["per_wall_s"])
        row["postgres_vs_sqlite_total_cpu"] = ratio(row["postgres"]["per_total_cpu_s"], row["sqlite"]["per_total_cpu_s"])
        out["fanout"].append(row)
    # Latency: the REST writer and the external one (raw SQLite, raw libpq), per store.
    specs = sorted({(r["sessions"], r["rate"]) for r in ok if r.get("scenario") == "latency"})
    for sessions, rate in specs:
        ceil = next((r for r in ok if r.get("scenario") == "latency" and r.get("label") == "ceiling"
                     and r["sessions"] == sessions and r["rate"] == rate), None)
        for kind in ("rest", "external"):
            row = {"sessions": sessions, "rate": rate, "writer": kind,
                   "ceiling_p99_ms": ms(ceil["p99_us"]) if ceil else None}
            for st in stores:
                want = "rest" if kind == "rest" else st
                r = next((x for x in ok if x.get("scenario") == "latency" and x.get("label") == "mcpsub"
                          and x.get("store") == st and x["sessions"] == sessions and x["rate"] == rate
                          and x.get("writer") == want), None)
                row[st] = {"writer": want, "samples": r.get("samples"), "p50_ms": ms(r["p50_us"]),
                           "p99_ms": ms(r["p99_us"]), "p999_ms": ms(r["p999_us"]), "max_ms": ms(r["max_us"]),
                           "server_cpu_s": r.get("server_cpu_s"), "store_cpu_s": r.get("store_cpu_s")} if r else None
            out["latency"].append(row)
    # Writes: REST PUTs per connection count; raw insert loops.
    for conns in sorted({r["connections"] for r in ok if r.get("scenario") == "write"}):
        row = {"connections": conns}
        for key, st, dur in (("sqlite", "sqlite", None), ("postgres", "postgres", "synchronous_commit-on"),
                             ("postgres_async", "postgres", "synchronous_commit-off")):
            r = next((x for x in ok if x.get("scenario") == "write" and x.get("store") == st
                      and x["connections"] == conns and (dur is None or x.get("durability") == dur)), None)
            row[key] = {"durability": r.get("durability"), "puts_per_s": r.get("per_wall_s"),
                        "per_server_cpu_s": r.get("per_server_cpu_s"), "store_cpu_s": r.get("store_cpu_s"),
                        "per_total_cpu_s": r.get("per_total_cpu_s", r.get("per_server_cpu_s"))} if r else None
        out["write"].append(row)
    # Reads: one record on 16 connections, per store and number of reader connections.
    for st, readers in sorted({(r.get("store"), r.get("readers")) for r in ok
                               if r.get("scenario") == "read" and r.get("label") != "page"},
                              key=lambda k: (k[0] != "sqlite", -(k[1] or 0))):
        m = [r for r in ok if r.get("scenario") == "read" and r.get("label") != "page" and r.get("store") == st
             and r.get("readers") == readers]
        out["read"].append({"store": st, "readers": readers if st == "postgres" else None, "runs": len(m),
                            "reads_per_s": median(m, "per_wall_s"), "per_server_cpu_s": median(m, "per_server_cpu_s"),
                            "store_cpu_s": median(m, "store_cpu_s"),
                            "per_total_cpu_s": median(m, "per_total_cpu_s") if st == "postgres"
                            else median(m, "per_server_cpu_s")})
    # A page deep in a large collection, on each store (medians of the interleaved rounds).
    for st in stores:
        m = [r for r in ok if r.get("scenario") == "read" and r.get("label") == "page" and r.get("store") == st]
        if m:
            wall = median(m, "per_wall_s")
            conns = m[0].get("connections")
            out["page"].append({"store": st, "runs": len(m), "read_uri": m[0].get("read_uri"), "connections": conns,
                                "pages_per_s": wall, "ms_per_page": round(conns * 1000 / wall, 3) if wall else None,
                                "per_server_cpu_s": median(m, "per_server_cpu_s"),
                                "store_cpu_s": median(m, "store_cpu_s")})
    for r in ok:
        if r.get("scenario") in ("sqlwrite", "pgwrite"):
            out["raw"].append({"store": r.get("store"), "durability": r.get("durability"),
                               "connections": r.get("connections", 1), "inserts_per_s": r.get("per_wall_s"),
                               "client_cpu_s": r.get("cpu_s"), "store_cpu_s": r.get("store_cpu_s"),
                               "per_store_cpu_s": r.get("per_store_cpu_s")})
    return out


def pg_tables(p):
    def g(row, st, key, digits=0):
        v = (row.get(st) or {}).get(key)
        return fmt(v, digits) if v is not None else "–"
    out = ["\n### PostgreSQL beside SQLite (the PostgreSQL group)\n"]
    c = p.get("cluster") or {}
    if c:
        st = c.get("settings") or {}
        out.append(f"PostgreSQL {c.get('version')}: " + ", ".join(f"{k}={v}" for k, v in sorted(st.items())) + "\n")
    out.append("| fan-out: sessions | writers | SQLite per CPU-s | SQLite / ceiling (CPU) | PostgreSQL: mcpsubd per CPU-s "
               "| PostgreSQL / ceiling (CPU) | PostgreSQL: mcpsubd + cluster per CPU-s | SQLite per wall-s "
               "| PostgreSQL per wall-s | PG / SQLite (wall) |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for f in p["fanout"]:
        out.append(f"| {fmt(f['sessions'])} | {f['writers']} | {g(f, 'sqlite', 'per_server_cpu_s')} "
                   f"| {g(f, 'sqlite', 'vs_ceiling_cpu', 2)} | {g(f, 'postgres', 'per_server_cpu_s')} "
                   f"| {g(f, 'postgres', 'vs_ceiling_cpu', 2)} | {g(f, 'postgres', 'per_total_cpu_s')} "
                   f"| {g(f, 'sqlite', 'per_wall_s')} | {g(f, 'postgres', 'per_wall_s')} "
                   f"| {fmt(f['postgres_vs_sqlite_wall'], 2)} |")
    out.append("")
    out.append("| latency (ms): sessions | commits/s | writer | SQLite p50 | SQLite p99 | SQLite p99.9 "
               "| PostgreSQL p50 | PostgreSQL p99 | PostgreSQL p99.9 | kernel ceiling p99 |")
    out.append("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for l in p["latency"]:
        w = "REST" if l["writer"] == "rest" else "raw (SQLite / libpq, other process)"
        out.append(f"| {fmt(l['sessions'])} | {fmt(l['rate'])} | {w} | {g(l, 'sqlite', 'p50_ms', 2)} "
                   f"| {g(l, 'sqlite', 'p99_ms', 2)} | {g(l, 'sqlite', 'p999_ms', 2)} | {g(l, 'postgres', 'p50_ms', 2)} "
                   f"| {g(l, 'postgres', 'p99_ms', 2)} | {g(l, 'postgres', 'p999_ms', 2)} | {fmt(l['ceiling_p99_ms'], 2)} |")
    out.append("")
    out.append("| writes: connections | SQLite PUT/s | SQLite per CPU-s | PostgreSQL PUT/s | PostgreSQL: mcpsubd per CPU-s "
               "| PostgreSQL: mcpsubd + cluster per CPU-s | PostgreSQL, synchronous_commit off: PUT/s |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|")
    for w in p["write"]:
        out.append(f"| {w['connections']} | {g(w, 'sqlite', 'puts_per_s')} | {g(w, 'sqlite', 'per_server_cpu_s')} "
                   f"| {g(w, 'postgres', 'puts_per_s')} | {g(w, 'postgres', 'per_server_cpu_s')} "
                   f"| {g(w, 'postgres', 'per_total_cpu_s')} | {g(w, 'postgres_async', 'puts_per_s')} |")
    out.append("")
    out.append("| raw insert loop | durability | connections | inserts/s | database server CPU-s | inserts per database server CPU-s |")
    out.append("|---|---|---:|---:|---:|---:|")
    for r in p["raw"]:
        out.append(f"| {r['store']} | {r['durability']} | {r['connections']} | {fmt(r['inserts_per_s'])} "
                   f"| {fmt(r['store_cpu_s'], 2) if r['store_cpu_s'] is not None else '– (in the loop)'} "
                   f"| {fmt(r['per_store_cpu_s'])} |")
    if p.get("read"):
        out.append("")
        out.append("| reads (one record, 16 connections) | reader connections | runs | reads/s | per mcpsubd CPU-s "
                   "| database server CPU-s | per mcpsubd + database CPU-s |")
        out.append("|---|---:|---:|---:|---:|---:|---:|")
        for r in p["read"]:
            out.append(f"| {r['store']} | {r['readers'] if r['readers'] is not None else '– (on the loop)'} "
                       f"| {r['runs']} | {fmt(r['reads_per_s'])} | {fmt(r['per_server_cpu_s'])} "
                       f"| {fmt(r['store_cpu_s'], 2)} | {fmt(r['per_total_cpu_s'])} |")
    if p.get("page"):
        out.append("")
        pg0 = p["page"][0]
        out.append(f"| a page deep in a large collection (`{pg0['read_uri']}`, {pg0['connections']} connections) | runs "
                   f"| pages/s | ms a page ({pg0['connections']} in flight) | per mcpsubd CPU-s | database server CPU-s |")
        out.append("|---|---:|---:|---:|---:|---:|")
        for r in p["page"]:
            out.append(f"| {r['store']} | {r['runs']} | {fmt(r['pages_per_s'])} | {fmt(r['ms_per_page'], 2)} "
                       f"| {fmt(r['per_server_cpu_s'])} | {fmt(r['store_cpu_s'], 2)} |")
    return "\n".join(out)


def goal(what, target, measured, met):
    return {"goal": what, "target": target, "measured": measured, "met": bool(met)}


def fmt(v, digits=0):
    if v is None:
        return "–"
    if isinstance(v, float) and digits:
        return f"{v:,.{digits}f}"
    return f"{v:,.0f}" if isinstance(v, (int, float)) else str(v)


def tables(s):
    out = []
    out.append("### Fan-out (notifications per second)\n")
    out.append("| sessions | writers | runs | frames/segment | mcpsub per CPU-s | ceiling per CPU-s | mcpsub / ceiling (CPU) "
               "| mcpsub per wall-s | ceiling per wall-s | mcpsub / ceiling (wall) | peer per CPU-s | mcpsub / peer (CPU) |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for f in s["fanout"]:
        rng = f["vs_ceiling_cpu_range"]
        spread = f" ({rng[0]:.2f}–{rng[1]:.2f})" if rng and f["runs"] > 1 else ""
        out.append(f"| {fmt(f['sessions'])} | {f['writers']} | {f['runs']} | {fmt(f['frames_per_segment'], 1)} | {fmt(f['mcpsub_per_cpu_s'])} "
                   f"| {fmt(f['ceiling_per_cpu_s'])} | {fmt(f['vs_ceiling_cpu'], 2)}{spread} | {fmt(f['mcpsub_per_wall_s'])} "
                   f"| {fmt(f['ceiling_per_wall_s'])} | {fmt(f['vs_ceiling_wall'], 2)} | {fmt(f['peer_per_cpu_s'])} "
                   f"| {fmt(f['vs_peer_cpu'], 1)} |")
    out.append("\n### Latency, commit -> notification received (ms)\n")
    out.append("| system | writer | sessions | commits/s | samples | p50 | p99 | p99.9 | max |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for l in s["latency"]:
        out.append(f"| {l['system']} | {l['writer']} | {fmt(l['sessions'])} | {fmt(l['rate'])} | {fmt(l['samples'])} "
                   f"| {l['p50_ms']:.2f} | {l['p99_ms']:.2f} | {l['p999_ms']:.2f} | {l['max_ms']:.2f} |")
    out.append("\n### Idle sessions (2 subscriptions and an open stream each)\n")
    out.append("| sessions | server RSS per session (B) | kernel TCP buffer memory per session (B) | kernel socket slabs per session, both ends (B) |")
    out.append("|---:|---:|---:|---:|")
    for i in s["idle"]:
        out.append(f"| {fmt(i['sessions'])} | {fmt(i['server_rss_per_session'])} | {fmt(i['kernel_tcp_mem_per_session'])} "
                   f"| {fmt(i['kernel_socket_slab_per_session'])} |")
    out.append("\n### Reads (resources/read of one record, keep-alive)\n")
    out.append("| system | connections | workers | runs | reads/s | per worker | per server CPU-s "
               "| read ceiling per CPU-s (as many processes) | system / ceiling (CPU) |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in s["read"]:
        rng = r["vs_ceiling_cpu_range"]
        spread = f" ({rng[0]:.2f}–{rng[1]:.2f})" if rng and len(rng) == 2 and r["runs"] > 1 else ""
        out.append(f"| {r['system']} | {r['connections']} | {r['workers']} | {r['runs']} | {fmt(r['per_wall_s'])} "
                   f"| {fmt(r['per_worker_wall_s'])} | {fmt(r['per_server_cpu_s'])} "
                   f"| {fmt(r['ceiling_per_server_cpu_s'])} | {fmt(r['vs_ceiling_cpu'], 2)}{spread} |")
    out.append("\n### Writes (one row per transaction)\n")
    out.append("| writer | connections | writes/s | per server CPU-s | raw SQLite inserts/s (same file, same triggers) | writes / raw |")
    out.append("|---|---:|---:|---:|---:|---:|")
    for w in s["write"]:
        what = "REST PUT" if w["writer"] == "rest" else "put_record (MCP)"
        out.append(f"| {what} | {fmt(w['connections'])} | {fmt(w['per_s'])} | {fmt(w['per_server_cpu_s'])} "
                   f"| {fmt(w['raw_inserts_per_s'])} | {fmt(w['vs_raw'], 2)} |")
    out.append("\n### Reconnect storm\n")
    out.append("| sessions | dropped | behind | catch-up p50 (s) | all caught up (s) | recovered updates "
               "| others p99 before (ms) | others p99 during (ms) |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in s["storm"]:
        out.append(f"| {fmt(t['sessions'])} | {fmt(t['dropped'])} | {fmt(t['behind'])} | {fmt(t['catchup_p50_s'], 3)} "
                   f"| {fmt(t['catchup_all_s'], 3)} | {fmt(t['recovered_updates'])} "
                   f"| {fmt((t['baseline_p99_us'] or 0) / 1000, 1)} | {fmt((t['storm_p99_us'] or 0) / 1000, 1)} |")
    out.append("\n### Listen streams (2026-07-28) beside GET streams (2025)\n")
    out.append("| scenario | sessions | listen per CPU-s | GET per CPU-s | listen p99 (ms) | GET p99 (ms) |")
    out.append("|---|---:|---:|---:|---:|---:|")
    for l in s["listen"]:
        out.append(f"| {l['scenario']} | {fmt(l['sessions'])} | {fmt(l['listen_per_cpu_s'])} | {fmt(l['get_per_cpu_s'])} "
                   f"| {fmt(l['listen_p99_ms'], 2)} | {fmt(l['get_p99_ms'], 2)} |")
    out.append("\n### Authentication (per server CPU-second, against the same run without it)\n")
    out.append("| scenario | mode | runs | per server CPU-s | per wall-s | cost |")
    out.append("|---|---|---:|---:|---:|---:|")
    for a in s["auth"]:
        cost = f"{a['cost']:.1%}" if a["cost"] is not None else "–"
        out.append(f"| {a['scenario']} | {a['mode']} | {a['runs']} | {fmt(a['per_server_cpu_s'])} | {fmt(a['per_wall_s'])} | {cost} |")
    out.append("\n### Filtered subscriptions (each session a distinct filtered URI matching every row; "
               "mixed: one session of two other URIs among the collection's; beside: one session of the "
               "collection and a record among them; both: every session the collection and its own "
               "filtered URI, two updates a commit)\n")
    out.append("| sessions | runs | collection per CPU-s | filtered per CPU-s | filtered / collection | "
               "mixed per CPU-s | mixed / collection | beside per CPU-s | beside / collection | "
               "both per CPU-s | both / collection |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for f in s["filters"]:
        out.append(f"| {fmt(f['sessions'])} | {f['runs']} | {fmt(f['collection_per_cpu_s'])} | "
                   f"{fmt(f['filtered_per_cpu_s'])} | {fmt(f['filtered_vs_collection'], 2)} | "
                   f"{fmt(f.get('mixed_per_cpu_s'))} | {fmt(f.get('mixed_vs_collection'), 2)} | "
                   f"{fmt(f.get('beside_per_cpu_s'))} | {fmt(f.get('beside_vs_collection'), 2)} | "
                   f"{fmt(f.get('both_per_cpu_s'))} | {fmt(f.get('both_vs_collection'), 2)} |")
    if any(f.get("filtered_user_ns") is not None for f in s["filters"]):
        out.append("\nThe server's user time a notification, medians (what the per-topic work costs; "
                   "the kernel's share moves with the TCP batching of each run):\n")
        out.append("| sessions | collection (ns) | filtered (ns) | filtered - collection (ns) |")
        out.append("|---:|---:|---:|---:|")
        for f in s["filters"]:
            c, u = f.get("collection_user_ns"), f.get("filtered_user_ns")
            out.append(f"| {fmt(f['sessions'])} | {fmt(c, 1)} | {fmt(u, 1)} | "
                       f"{fmt(u - c if c is not None and u is not None else None, 1)} |")
    out.append("\n### Subscribe (one session, a new record URI each)\n")
    out.append("| held | connections | runs | subscribes per s | (range) | per server CPU-s | ms per subscribe |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|")
    for r in s["subscribe"]:
        lo, hi = r["per_wall_s_range"]
        out.append(f"| {fmt(r['held'])} | {r['connections']} | {r['runs']} | {fmt(r['per_wall_s'])} | "
                   f"{fmt(lo)}–{fmt(hi)} | {fmt(r['per_server_cpu_s'])} | {fmt(r['ms_per_subscribe'], 3)} |")
    if s["match"]:
        out.append("\n### Matching a change (bench_match: one worker's subscription index, no I/O)\n")
        out.append("| topics on the table | kind | ns per change | topics matched per change |")
        out.append("|---:|---|---:|---:|")
        for r in s["match"]:
            out.append(f"| {fmt(r['topics'])} | {r['kind']} | {fmt(r['ns_per_change'], 1)} | {fmt(r['matched_per_change'], 2)} |")
    out.append("\n### Goals\n")
    out.append("| goal | target | measured | met |")
    out.append("|---|---|---:|---|")
    for g in s["goals"]:
        m = g["measured"]
        out.append(f"| {g['goal']} | {g['target']} | {fmt(m, 2) if isinstance(m, float) and m < 100 else fmt(m)} "
                   f"| {'yes' if g['met'] else '**no**'} |")
    return "\n".join(out)


GNUPLOT_COMMON = """set terminal pngcairo size 960,540 font ",11"
set key outside right top
set grid ytics
"""


def plots(s, outdir):
    if shutil.which("gnuplot") is None:
        print("report: gnuplot not found; no plots", file=sys.stderr)
        return
    os.makedirs(outdir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        # Latency percentiles: one panel per session count, one cluster per (system, writer).
        names = {"mcpsub": "mcpsub", "ceiling": "kernel ceiling", "peer": "SDK peer"}
        sizes = sorted({l["sessions"] for l in s["latency"]})
        script = GNUPLOT_COMMON.replace("960,540", "1100,520") + f"""set output "{os.path.join(outdir, 'latency.png')}"
set multiplot layout 1,{max(1, len(sizes))} title "Commit -> notification received (ms, log scale; dashed: the goal)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set logscale y
set ylabel "ms"
set xtics rotate by -30 font ",9"
set key inside top left
"""
        for size in sizes:
            dat = os.path.join(tmp, f"latency-{size}.dat")
            with open(dat, "w") as f:
                f.write("label p50 p99 p999\n")
                for l in (x for x in s["latency"] if x["sessions"] == size):
                    writer = "" if l["system"] == "ceiling" else " " + ("REST" if l["writer"] == "rest" else "SQLite")
                    f.write(f"\"{names.get(l['system'], l['system'])}{writer}\" {l['p50_ms']} {l['p99_ms']} {l['p999_ms']}\n")
            limit = GOALS["p99_ms"].get(size)
            script += f'set title "{size:,} sessions"\nunset arrow\n'
            if limit:
                script += f"set arrow from graph 0, first {limit} to graph 1, first {limit} nohead dt 2 lw 2\n"
            script += "set yrange [0.5:*]\n"
            script += f'plot "{dat}" using 2:xtic(1) title "p50", "" using 3 title "p99", "" using 4 title "p99.9"\n'
        script += "unset multiplot\n"
        # Fan-out versus sessions: mcpsub (batched and one writer), ceiling, peer.
        fan = os.path.join(tmp, "fanout.dat")
        with open(fan, "w") as f:
            for writers in sorted({x["writers"] for x in s["fanout"]}, reverse=True):
                rows = sorted((x for x in s["fanout"] if x["writers"] == writers), key=lambda x: x["sessions"])
                f.write(f"# writers {writers}\n")
                for x in rows:
                    f.write(f"{x['sessions']} {x['mcpsub_per_cpu_s'] or 'NaN'} {x['ceiling_per_cpu_s'] or 'NaN'} "
                            f"{x['peer_per_cpu_s'] or 'NaN'} {x['mcpsub_per_wall_s'] or 'NaN'}\n")
                f.write("\n\n")
        multi = any(x["writers"] > 1 for x in s["fanout"])
        single = any(x["writers"] == 1 for x in s["fanout"])
        parts = []
        idx = 0
        if multi:
            parts += [f'"{fan}" index {idx} using 1:2 with linespoints lw 2 title "mcpsub, 32 writers"',
                      f'"{fan}" index {idx} using 1:3 with linespoints dt 2 title "kernel ceiling, same batching"',
                      f'"{fan}" index {idx} using 1:4 with linespoints title "TS SDK peer"']
            idx += 1
        if single:
            parts += [f'"{fan}" index {idx} using 1:2 with linespoints lw 2 title "mcpsub, 1 writer"',
                      f'"{fan}" index {idx} using 1:3 with linespoints dt 2 title "kernel ceiling, same batching (1 writer)"']
        script += f"""
reset
{GNUPLOT_COMMON}set output "{os.path.join(outdir, 'fanout.png')}"
set title "Fan-out: notifications per server CPU-second (dashed grey: the goal)"
set key outside below
set logscale xy
set xrange [500:40000]
set arrow from graph 0, first 1e6 to graph 1, first 1e6 nohead dt 3 lc rgb "gray40"
set xlabel "sessions subscribed to one collection"
set ylabel "notifications / CPU-s"
set format y "%.0s%c"
plot {", ".join(parts) if parts else "NaN notitle"}
"""
        path = os.path.join(tmp, "plots.gp")
        with open(path, "w") as f:
            f.write(script)
        subprocess.run(["gnuplot", path], check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", default="full")
    ap.add_argument("--started")
    ap.add_argument("--elapsed", type=float)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--fd-limit", type=int)
    ap.add_argument("--git", default="unknown")
    ap.add_argument("--plots")
    ap.add_argument("--load", help="/proc/loadavg (1, 5, 15 min) when the run started")
    ap.add_argument("--load-after")
    ap.add_argument("--pg-cluster", help="JSON: the PostgreSQL group's server version and settings")
    a = ap.parse_args()
    runs = []
    with open(a.results) as f:
        for line in f:
            line = line.strip()
            if line:
                runs.append(json.loads(line))
    summary = summarize([r for r in runs if r.get("group") != "pg"])
    if a.mode != "full":
        summary["goals"] = []  # tiny sizes: correctness only, no figure is judged
    pg_runs = [r for r in runs if r.get("group") == "pg"]
    if pg_runs:
        cluster = None
        if a.pg_cluster:
            with open(a.pg_cluster) as f:
                cluster = json.load(f)
        summary["postgres"] = summarize_pg(pg_runs, cluster)
    doc = {"schema": 1, "mode": a.mode, "started": a.started, "elapsed_s": a.elapsed, "git": a.git,
           "machine": machine(a.fd_limit), "load_average": {"before": a.load, "after": a.load_after},
           "server": {"workers": a.workers}, "summary": summary, "runs": runs}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    if len(pg_runs) < len(runs):
        print(tables(summary))
    if "postgres" in summary:
        print(pg_tables(summary["postgres"]))
    failed = [r for r in runs if not r.get("ok")]
    for r in failed:
        print(f"FAILED: {r.get('label')} {r.get('scenario')}: {r.get('error')}", file=sys.stderr)
    if a.plots and a.mode == "full" and len(pg_runs) < len(runs):  # the PostgreSQL group alone: no plot
        plots(summary, a.plots)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
