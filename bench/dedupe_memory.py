"""Dedupe memory and false drops: our Redis Bloom filter against scrapy-redis's SET of hex SHA1.

    python bench/dedupe_memory.py [--count 10000000] [--insert 2000000] [--probe 1000000]
        [--set-count 10000000] [--weak-rate 1e-3]

Everything runs in a Redis server of the benchmark's own (``redis-server --save ""
--appendonly no`` on a free port), so ``MEMORY USAGE`` and ``used_memory`` see nothing else.
Fingerprints are what the crawler stores: SHA1 of ``doc_key:<dbname/filename>`` (20 bytes) for
ours, the 40-character hex SHA1 that scrapy-redis's RFPDupeFilter SADDs for theirs.

Ours (``BloomDupeFilter`` with the crawler's defaults: first layer 100,000, error rate 1e-9,
growth 2, each layer's error rate half the previous one's):

1. *Inserted*: ``--insert`` distinct fingerprints go through the filter's own Lua path
   (``add_fingerprints``, 10,000 a call). Every "seen" answer among them is a false drop, and
   is counted. Then ``--probe`` fresh fingerprints are tested without being added (a read-only
   script built from the filter's own Lua functions). The bits actually set in each layer
   (``BITCOUNT``) give each layer's measured false-positive rate, ``(set bits / m)^k``.
2. *At --count*: the layers a filter holding ``--count`` fingerprints has are allocated by the
   filter's own ``bloom_add_layer`` (the code that runs when the newest layer fills up); a layer
   is a Redis string allocated whole when it is created, so its memory does not depend on how
   many of its bits are set. ``MEMORY USAGE`` of every key / ``--count`` is the figure. When
   ``--insert`` >= ``--count`` this step is skipped: the inserted filter is measured directly.
   Inserting through Lua costs about 60-100 us per fingerprint on a 2-core machine (every layer
   is read for every fingerprint), so 10 million take 15-20 minutes: hence the default.
3. *The false-drop rate at --count*, computed from the layer sizes: a layer of ``m`` bits and
   ``k`` positions holding ``n`` fingerprints answers "seen" for a new one with probability
   ``f = (1 - exp(-k n / m))^k``; a new document is dropped if any layer says seen:
   ``P = 1 - prod(1 - f_i)``, at most ``sum f_i``. Full layers have ``n = capacity``, the
   newest its current count. The rate is largest just before a layer fills; the table gives it
   at ``--count`` and its maximum over the whole crawl up to ``--count``, plus the expected
   number of false drops over that crawl (the sum of P over every insertion). Positions come
   from the fingerprint's first 8 bytes (double hashing), so two documents with the same
   8-byte prefix collide for sure: that adds ``count / 2^64`` (included).
4. *The formula checked where it can be measured*: the same code with error rate
   ``--weak-rate`` (1e-3), filled with 1,000,000 fingerprints, then probed with ``--weak-probe``
   (2,000,000) fresh ones: measured false positives against the formula's prediction. At 1e-9, 1,000,000 probes
   can only show 0 (a rate below about 3e-6 at 95% confidence); the weak filter shows that this
   hashing matches the formula, and the formula then gives the 1e-9 figure.

Theirs: a SET of 40-character hex strings (SADD, pipelined), measured with ``MEMORY USAGE key
SAMPLES 0`` (every member) at 1,000,000 and at ``--set-count``.

Prints one table; exit status 0 when ours meets the targets (<= 24 bytes per fingerprint,
false-drop rate <= 1e-9 per document).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.compare_schedulers import BenchRedis, exit_on_sigterm, machine  # noqa: E402
from cnkispider import default_settings  # noqa: E402
from cnkispider.scheduling.dupefilter import BLOOM_LUA, BloomDupeFilter, layer_plan  # noqa: E402

TARGET_BYTES = 24
TARGET_RATE = 1e-9
BATCH = 10_000

#: Test fingerprints against every layer without adding them; returns how many were "seen".
PROBE_LUA = (
    BLOOM_LUA
    + r"""
local B = bloom_open(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local seen = 0
for i = 5, #ARGV do
  for l = 0, B.n - 1 do
    if bloom_bits(B, l, ARGV[i], 'GET') then
      seen = seen + 1
      break
    end
  end
end
return seen
"""
)

#: Allocate the layers a filter holding ARGV[5] fingerprints has, as the filter itself does
#: when its newest layer fills up (bloom_add_layer), without inserting anything.
GROW_LUA = (
    BLOOM_LUA
    + r"""
local B = bloom_open(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local target = tonumber(ARGV[5])
local held = 0
for i = 0, B.n - 2 do held = held + B.cap[i] end
while held + B.cap[B.n - 1] <= target do
  held = held + B.cap[B.n - 1]
  bloom_add_layer(B)
end
B.count = target - held
B.dirty = true
bloom_close(B)
return B.n
"""
)


def fingerprints(start: int, stop: int, tag: bytes = b"") -> list[bytes]:
    """What DocKeyFingerprinter makes of distinct documents: SHA1 of ``doc_key:...``."""
    return [hashlib.sha1(b"doc_key:%sSCPD/CN%012d" % (tag, i)).digest() for i in range(start, stop)]


def layer_fpr(k: int, m: int, n: int) -> float:
    return (1.0 - math.exp(-k * n / m)) ** k if n > 0 else 0.0


def layers_at(count: int, capacity: int, rate: float, growth: float) -> list[tuple]:
    """(capacity, bits, hashes, fingerprints held) of every layer of a filter holding ``count``."""
    out, held, i = [], 0, 0
    while True:
        layer = layer_plan(capacity, rate, growth, i)
        if held + layer.capacity <= count:
            out.append((layer.capacity, layer.bits, layer.hashes, layer.capacity))
            held += layer.capacity
            i += 1
            continue
        out.append((layer.capacity, layer.bits, layer.hashes, count - held))
        return out


def any_of(rates) -> float:
    """Probability that at least one of independent events with these rates happens (exact in
    floating point for tiny rates, where 1 - prod(1 - f) would round to 0)."""
    return -math.expm1(sum(math.log1p(-f) for f in rates))


def drop_rate(layers: list[tuple]) -> float:
    return any_of(layer_fpr(k, m, n) for _, m, k, n in layers)


def crawl_drops(count: int, capacity: int, rate: float, growth: float, step: int = 1000):
    """(largest per-document false-drop probability, expected false drops) over a crawl that
    inserts ``count`` fingerprints one after the other, plus the 8-byte prefix collisions."""
    worst, expected, held, i = 0.0, 0.0, 0, 0
    full_keep = 1.0  # probability that no full layer says "seen"
    while held < count:
        layer = layer_plan(capacity, rate, growth, i)
        span = min(layer.capacity, count - held)
        for n in range(0, span, step):
            width = min(step, span - n)
            mid = n + width / 2
            p = 1.0 - full_keep * (1.0 - layer_fpr(layer.hashes, layer.bits, mid))
            p += (held + mid) / 2.0**64
            expected += p * width
        edge = 1.0 - full_keep * (1.0 - layer_fpr(layer.hashes, layer.bits, span))
        worst = max(worst, edge + (held + span) / 2.0**64)
        full_keep *= 1.0 - layer_fpr(layer.hashes, layer.bits, layer.capacity)
        held += span
        i += 1
    return worst, expected


def memory_of(client, pattern: str) -> int:
    return sum(client.memory_usage(key, samples=0) or 0 for key in client.scan_iter(match=pattern))


def insert(dfilter: BloomDupeFilter, count: int, say) -> tuple[int, float]:
    """Insert ``count`` distinct fingerprints; (false drops, seconds)."""
    started, dropped = time.monotonic(), 0
    for start in range(0, count, BATCH):
        dropped += sum(dfilter.add_fingerprints(fingerprints(start, min(count, start + BATCH))))
        if start and start % 500_000 == 0:
            rate = start / (time.monotonic() - started)
            say(f"  {start:,} inserted ({rate:,.0f}/s, eta {(count - start) / rate:.0f} s)")
    return dropped, time.monotonic() - started


def probe(client, dfilter: BloomDupeFilter, count: int) -> int:
    script = client.register_script(PROBE_LUA)
    seen = 0
    for start in range(0, count, BATCH):
        fps = fingerprints(start, min(count, start + BATCH), tag=b"fresh")
        seen += script(keys=[dfilter.key], args=[*dfilter.script_args(), *fps])
    return seen


def measured_layers(client, dfilter: BloomDupeFilter) -> list[tuple[int, int, int]]:
    """(bits, hashes, bits set) of every layer, from Redis."""
    state = {k.decode(): int(float(v)) for k, v in client.hgetall(dfilter.key).items()}
    return [
        (state[f"m{i}"], state[f"k{i}"], client.bitcount(f"{dfilter.key}:{i}"))
        for i in range(state["layers"])
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000_000, help="fingerprints to report at")
    parser.add_argument(
        "--insert",
        type=int,
        default=2_000_000,
        help="fingerprints really inserted through the Lua path",
    )
    parser.add_argument("--probe", type=int, default=1_000_000, help="fresh fingerprints tested")
    parser.add_argument(
        "--set-count",
        type=int,
        default=10_000_000,
        help="hex SHA1 strings in the scrapy-redis-style SET",
    )
    parser.add_argument(
        "--weak-rate",
        type=float,
        default=1e-3,
        help="error rate of the filter that checks the formula",
    )
    parser.add_argument(
        "--weak-probe",
        type=int,
        default=2_000_000,
        help="fresh fingerprints tested against that filter",
    )
    args = parser.parse_args(argv)
    command = "python bench/dedupe_memory.py " + " ".join(sys.argv[1:] if argv is None else argv)

    exit_on_sigterm()

    def say(text):
        print(text, flush=True)

    capacity, rate, growth = (
        default_settings.DUPEFILTER_CAPACITY,
        default_settings.DUPEFILTER_ERROR_RATE,
        default_settings.DUPEFILTER_GROWTH,
    )
    server = BenchRedis()
    client = server.client
    rows = []
    try:
        # 1. ours, really inserted
        say(f"ours: inserting {args.insert:,} fingerprints through the filter's Lua path ...")
        real = BloomDupeFilter("real", client=client)
        base = client.info("memory")["used_memory"]
        dropped, seconds = insert(real, args.insert, say)
        used = client.info("memory")["used_memory"] - base
        real_bytes = memory_of(client, "real:bloom*")
        layers = measured_layers(client, real)
        measured_p = any_of((s / m) ** k for m, k, s in layers)
        planned = layers_at(args.insert, capacity, rate, growth)
        say(
            f"  done in {seconds:.0f} s ({args.insert / seconds:,.0f}/s); false drops among them: "
            f"{dropped}; probing {args.probe:,} fresh fingerprints ..."
        )
        probed = probe(client, real, args.probe)
        rows.append(
            (
                "ours, inserted",
                args.insert,
                real_bytes,
                used,
                len(layers),
                drop_rate(planned),
                measured_p,
                f"{dropped} of {args.insert:,} inserted; {probed} of {args.probe:,} probes",
            )
        )

        # 2. ours at --count: the layers such a filter has, allocated by the filter's own code
        if args.count > args.insert:
            grown = BloomDupeFilter("grown", client=client)
            base = client.info("memory")["used_memory"]
            n_layers = client.register_script(GROW_LUA)(
                keys=[grown.key], args=[*grown.script_args(), args.count]
            )
            used = client.info("memory")["used_memory"] - base
            at_count = layers_at(args.count, capacity, rate, growth)
            rows.append(
                (
                    "ours, layers of --count",
                    args.count,
                    memory_of(client, "grown:bloom*"),
                    used,
                    n_layers,
                    drop_rate(at_count),
                    None,
                    "memory measured; rate from the layer sizes",
                )
            )
            client.delete(*client.scan_iter(match="grown:bloom*"))
        worst, expected = crawl_drops(args.count, capacity, rate, growth)
        client.delete(*client.scan_iter(match="real:bloom*"))

        # 4. the formula, checked on a filter whose rate can be measured
        weak_n = min(1_000_000, args.insert)
        say(
            f"formula check: error rate {args.weak_rate}, {weak_n:,} inserted, "
            f"{args.weak_probe:,} probed ..."
        )
        weak = BloomDupeFilter("weak", client=client, error_rate=args.weak_rate)
        weak_dropped, _ = insert(weak, weak_n, say)
        weak_seen = probe(client, weak, args.weak_probe)
        weak_layers = measured_layers(client, weak)
        weak_predicted = (
            drop_rate(layers_at(weak_n, capacity, args.weak_rate, growth)) * args.weak_probe
        )
        weak_measured_bits = any_of((s / m) ** k for m, k, s in weak_layers) * args.weak_probe
        client.delete(*client.scan_iter(match="weak:bloom*"))

        # theirs: a SET of hex SHA1 (what scrapy-redis's RFPDupeFilter stores)
        say(f"scrapy-redis: SADD {args.set_count:,} hex SHA1 strings ...")
        theirs = []
        base = client.info("memory")["used_memory"]
        checkpoints = sorted({min(1_000_000, args.set_count), args.set_count})
        done = 0
        for point in checkpoints:
            while done < point:
                stop = min(point, done + 200_000)
                pipe = client.pipeline(transaction=False)
                for start in range(done, stop, 1000):
                    pipe.sadd(
                        "theirs:dupefilter",
                        *(fp.hex() for fp in fingerprints(start, min(stop, start + 1000))),
                    )
                pipe.execute()
                done = stop
            theirs.append(
                (
                    point,
                    client.memory_usage("theirs:dupefilter", samples=0),
                    client.info("memory")["used_memory"] - base,
                )
            )
        for point, usage, used in theirs:
            rows.append(
                ("scrapy-redis SET", point, usage, used, None, None, None, "exact: no false drops")
            )
    finally:
        server.stop()

    print()
    print(f"Dedupe memory, {time.strftime('%Y-%m-%d')}, {machine()}, Redis of its own")
    print(f"command: {command}")
    head = (
        f"{'filter':<26}{'fingerprints':>13}{'MEMORY USAGE':>15}{'B/fp':>7}{'used_memory':>15}"
        f"{'B/fp':>7}{'layers':>7}{'P(drop) formula':>17}{'P(drop) bits':>14}  false drops seen"
    )
    print(head)
    print("-" * len(head))
    for name, n, usage, used, n_layers, p_formula, p_bits, note in rows:
        print(
            f"{name:<26}{n:>13,}{usage:>15,}{usage / n:>7.2f}{used:>15,}{used / n:>7.2f}"
            f"{n_layers if n_layers is not None else '-':>7}"
            f"{f'{p_formula:.2e}' if p_formula is not None else '0':>17}"
            f"{f'{p_bits:.2e}' if p_bits is not None else '-':>14}  {note}"
        )
    ours = next(r for r in reversed(rows) if r[0].startswith("ours"))
    at_count = ours[2] / ours[1]
    print()
    print(
        f"  ours at {args.count:,}: P(false drop) of a new document {ours[5]:.2e} now, at most "
        f"{worst:.2e} at any point of the crawl (layer sizes, plus {args.count:,}/2^64 for "
        f"8-byte prefix collisions); expected false drops over the whole crawl: {expected:.4f}"
    )
    print(
        f"  formula check (error rate {args.weak_rate}, {weak_n:,} in, {args.weak_probe:,} fresh "
        f"probes): predicted {weak_predicted:.0f} false drops from the layer sizes, "
        f"{weak_measured_bits:.0f} from the bits really set, measured {weak_seen} "
        f"({weak_seen / weak_measured_bits:.3f}x, +-{1 / math.sqrt(weak_measured_bits):.3f} by "
        f"chance); {weak_dropped} false drops during its insertion"
    )
    ok_bytes, ok_rate = at_count <= TARGET_BYTES, worst <= TARGET_RATE
    print(
        f"  target: <= {TARGET_BYTES} bytes per fingerprint at {args.count:,}: {at_count:.2f} "
        f"{'PASS' if ok_bytes else 'FAIL'}"
    )
    print(
        f"  target: false-drop rate <= {TARGET_RATE:g} per document: {worst:.2e} "
        f"{'PASS' if ok_rate else 'FAIL'}"
    )
    if theirs:
        point, usage, _ = theirs[-1]
        print(
            f"  scrapy-redis SET at {point:,}: {usage / point:.1f} bytes per fingerprint, "
            f"{usage / point / at_count:.1f}x ours"
        )
    return 0 if ok_bytes and ok_rate else 1


if __name__ == "__main__":
    sys.exit(main())
