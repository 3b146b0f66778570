#!/usr/bin/env python3
"""A long run of the real daemons over config/local: does anything pile up?

Starts `braid emu`, `braid server` and `braid client` from the given configs (config/local by
default; run from the repository root after `cargo build --release`), then for --minutes keeps
them busy through the client's SOCKS5 inbound with:
  - 16 downloads at a time of 1 B to 200 KB from a local origin, every byte checked;
  - a 10 MB download and a 5 MB upload every 20 s, checked;
  - downloads broken off by the application with a reset after a random number of bytes;
  - 50 connections held open for 60 s, then closed, again and again;
  - a UDP association every 5 s sending 100 datagrams to a local echo server;
  - every 3 minutes all links dark for 5 s (the emulator stopped with SIGSTOP).
Every 20 s it writes one JSON line to --out (resident memory, threads and open files of the
server and the client, and both daemons' session counters from `braid status --json`). When the
load stops it waits 90 s, then prints a summary: transfers done and failed, and what each
daemon holds at the start, at its peak, under load at the end, and idle afterwards. The daemons
are stopped on exit. Uses 127.0.0.1 only. Nothing here is run by the test suite
(crates/proxy/tests/daemon_churn.rs is the short check that runs in CI).
"""
import argparse
import asyncio
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time

SOCKS = ("127.0.0.1", 1080)
ORIGIN = ("127.0.0.1", 18080)
UDP_ECHO = ("127.0.0.1", 18081)
BRAID = "target/release/braid"

stats = {"ok": 0, "failed": 0, "bytes": 0, "aborted": 0, "udp_sent": 0, "udp_back": 0,
         "outages": 0, "errors": {}}
_chunks = {}


def chunk(first):
    """64 KiB whose byte i is (first + i) mod 256: byte k of a download is k + its seed."""
    first &= 0xFF
    if first not in _chunks:
        _chunks[first] = bytes((first + i) & 0xFF for i in range(65536))
    return _chunks[first]


async def origin(r, w):
    """`0` + u64 n: sends n pattern bytes; `1` + u64 n: reads n bytes, answers their count."""
    try:
        head = await r.readexactly(9)
        op, n = head[0], struct.unpack(">Q", head[1:])[0]
        if op == 0:
            sent = 0
            while sent < n:
                k = min(n - sent, 65536)
                w.write(chunk(n + sent)[:k])
                sent += k
                await w.drain()
        else:
            got = 0
            while got < n:
                d = await r.read(65536)
                if not d:
                    break
                got += len(d)
            w.write(struct.pack(">Q", got))
            await w.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        w.close()


class Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.transport.sendto(data, addr)


async def socks_connect():
    r, w = await asyncio.wait_for(asyncio.open_connection(*SOCKS), 30)
    w.write(b"\x05\x01\x00")
    await w.drain()
    if await r.readexactly(2) != b"\x05\x00":
        raise RuntimeError("SOCKS5 method refused")
    w.write(b"\x05\x01\x00\x01" + socket.inet_aton(ORIGIN[0]) + struct.pack(">H", ORIGIN[1]))
    await w.drain()
    reply = await asyncio.wait_for(r.readexactly(10), 30)
    if reply[1] != 0:
        raise RuntimeError(f"SOCKS5 reply {reply[1]}")
    return r, w


async def download(n, reset_after=None):
    r, w = await socks_connect()
    try:
        w.write(b"\x00" + struct.pack(">Q", n))
        await w.drain()
        got = 0
        while got < n:
            d = await asyncio.wait_for(r.read(262144), 60)
            if not d:
                raise RuntimeError(f"ended at {got} of {n}")
            if d[0] != (n + got) & 0xFF or d[-1] != (n + got + len(d) - 1) & 0xFF:
                raise RuntimeError(f"bytes changed at {got}")
            got += len(d)
            if reset_after is not None and got >= reset_after:
                w.get_extra_info("socket").setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                stats["aborted"] += 1
                return
        stats["bytes"] += n
    finally:
        w.close()


async def upload(n):
    r, w = await socks_connect()
    try:
        w.write(b"\x01" + struct.pack(">Q", n))
        block = os.urandom(65536)
        left = n
        while left:
            k = min(left, 65536)
            w.write(block[:k])
            left -= k
            await w.drain()
        got = struct.unpack(">Q", await asyncio.wait_for(r.readexactly(8), 60))[0]
        if got != n:
            raise RuntimeError(f"origin counted {got} of {n}")
        stats["bytes"] += n
    finally:
        w.close()


async def counted(what, kind):
    try:
        await what
        stats["ok"] += 1
    except Exception as e:  # every failure is counted by kind and message
        stats["failed"] += 1
        key = f"{kind}: {type(e).__name__} {str(e)[:60]}"
        stats["errors"][key] = stats["errors"].get(key, 0) + 1


async def small(end):
    while time.time() < end:
        await asyncio.gather(*[counted(download(random.randint(1, 200_000)), "small")
                               for _ in range(16)])


async def large(end):
    while time.time() < end:
        await counted(download(10_000_000), "10 MB down")
        await counted(upload(5_000_000), "5 MB up")
        await asyncio.sleep(20)


async def broken_off(end):
    while time.time() < end:
        await counted(download(5_000_000, reset_after=random.randint(1, 300_000)), "reset")
        await asyncio.sleep(0.5)


async def held(end):
    while time.time() < end:
        conns = []
        for _ in range(50):
            try:
                conns.append(await socks_connect())
            except Exception as e:
                stats["errors"][f"held: {type(e).__name__}"] = 1 + stats["errors"].get(
                    f"held: {type(e).__name__}", 0)
        await asyncio.sleep(60)
        for _, w in conns:
            w.close()


async def udp(end):
    while time.time() < end:
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection(*SOCKS), 30)
            w.write(b"\x05\x01\x00")
            await w.drain()
            await r.readexactly(2)
            w.write(b"\x05\x03\x00\x01\x00\x00\x00\x00\x00\x00")
            await w.drain()
            reply = await r.readexactly(10)
            if reply[1] != 0:
                raise RuntimeError(f"UDP ASSOCIATE reply {reply[1]}")
            relay = (socket.inet_ntoa(reply[4:8]), struct.unpack(">H", reply[8:10])[0])
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
            head = b"\x00\x00\x00\x01" + socket.inet_aton(UDP_ECHO[0]) + struct.pack(">H", UDP_ECHO[1])
            for _ in range(100):
                s.sendto(head + os.urandom(random.randint(10, 1200)), relay)
                stats["udp_sent"] += 1
                await asyncio.sleep(0.01)
            until = time.time() + 2
            while time.time() < until:
                try:
                    s.recvfrom(4096)
                    stats["udp_back"] += 1
                except BlockingIOError:
                    await asyncio.sleep(0.01)
            s.close()
            w.close()
        except Exception as e:
            key = f"udp: {type(e).__name__} {str(e)[:60]}"
            stats["errors"][key] = stats["errors"].get(key, 0) + 1
        await asyncio.sleep(5)


async def outages(end, emu):
    await asyncio.sleep(max(0.0, min(150.0, end - 120 - time.time())))
    while time.time() < end - 120:
        os.kill(emu, signal.SIGSTOP)
        await asyncio.sleep(5)
        os.kill(emu, signal.SIGCONT)
        stats["outages"] += 1
        await asyncio.sleep(max(0.0, min(180.0, end - 120 - time.time())))


def process(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "Threads")):
                out[line.split(":")[0]] = int(line.split()[1])
    return {"rss_kib": out.get("VmRSS"), "threads": out.get("Threads"),
            "files": len(os.listdir(f"/proc/{pid}/fd"))}


def counters(config):
    try:
        text = subprocess.run([BRAID, "status", "--json", "-c", config], capture_output=True,
                              timeout=10, check=True).stdout
        sessions = json.loads(text)["sessions"]
    except (subprocess.SubprocessError, ValueError, KeyError) as e:
        return {"error": str(e)[:80]}
    return {"sessions": len(sessions),
            "flows_open": sum(s["counters"]["flows_open"] for s in sessions),
            "memory_bytes": sum(s["counters"]["memory_bytes"] for s in sessions)}


async def monitor(end, daemons, configs, out, rows):
    start = time.time()
    while True:
        row = {"t_s": round(time.time() - start), "load": time.time() < end}
        for role in ("server", "client"):
            row[role] = {**process(daemons[role].pid), **counters(configs[role])}
        row["transfers"] = {k: v for k, v in stats.items() if k != "errors"}
        rows.append(row)
        out.write(json.dumps(row) + "\n")
        out.flush()
        if time.time() > end + 90:
            return
        await asyncio.sleep(20)


def summary(rows):
    print(json.dumps(stats, indent=1))
    for role in ("server", "client"):
        loaded = [r[role] for r in rows if r["load"]]
        print(f"{role}: resident KiB start {rows[0][role]['rss_kib']}, "
              f"peak {max(r['rss_kib'] for r in loaded)}, last under load {loaded[-1]['rss_kib']}, "
              f"idle {rows[-1][role]['rss_kib']}; open files {rows[0][role]['files']} -> "
              f"{rows[-1][role]['files']}; idle {json.dumps({k: v for k, v in rows[-1][role].items() if k not in ('rss_kib', 'files')})}")


async def main(args):
    daemons = {}
    configs = {"emu": args.emu, "server": args.server, "client": args.client}
    logs = []
    try:
        for role in ("emu", "server", "client"):
            log = open(os.path.join(os.path.dirname(args.out) or ".", f"soak-{role}.log"), "w")
            logs.append(log)
            daemons[role] = subprocess.Popen([BRAID, role, "-c", configs[role]], stdout=log,
                                             stderr=subprocess.STDOUT)
            await asyncio.sleep(1)
        await asyncio.sleep(3)
        listener = await asyncio.start_server(origin, *ORIGIN, backlog=512)
        await asyncio.get_running_loop().create_datagram_endpoint(Echo, local_addr=UDP_ECHO)
        end = time.time() + args.minutes * 60
        rows = []
        with open(args.out, "w") as out:
            await asyncio.gather(monitor(end, daemons, configs, out, rows), small(end),
                                 large(end), broken_off(end), held(end), udp(end),
                                 outages(end, daemons["emu"].pid))
        listener.close()
        summary(rows)
    finally:
        for p in daemons.values():
            p.send_signal(signal.SIGCONT)
            p.terminate()
        for p in daemons.values():
            p.wait(timeout=10)
        for log in logs:
            log.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=25.0)
    parser.add_argument("--emu", default="config/local/emu.toml")
    parser.add_argument("--server", default="config/local/server.toml")
    parser.add_argument("--client", default="config/local/client.toml")
    parser.add_argument("--out", default="target/soak.jsonl")
    if not os.path.exists(BRAID):
        sys.exit(f"{BRAID} not found: run `cargo build --release` in the repository root first")
    asyncio.run(main(parser.parse_args()))
