"""The Bloom dupefilter in Redis: no false drops, its memory per fingerprint, and its error rate."""

from __future__ import annotations

import hashlib
import math

import pytest
import scrapy
from scrapy.utils.test import get_crawler

from cnkispider.runtime.addon import ADDONS
from cnkispider.scheduling.dupefilter import BloomDupeFilter, bytes_for, layer_plan


def fingerprints(start: int, count: int) -> list[bytes]:
    return [hashlib.sha1(b"doc:%d" % i).digest() for i in range(start, start + count)]


def add_all(df: BloomDupeFilter, fps: list[bytes]) -> list[bool]:
    seen: list[bool] = []
    for i in range(0, len(fps), 2000):
        seen += df.add_fingerprints(fps[i : i + 2000])
    return seen


@pytest.mark.slow  # 200k fingerprints: Redis's CPU, 30 s on a busy machine
def test_no_false_drop_over_200k_distinct_fingerprints_and_every_repeat_is_caught(
    redis_client, redis_namespace
):
    df = BloomDupeFilter(redis_namespace, capacity=50_000, client=redis_client)
    fps = fingerprints(0, 200_000)
    assert not any(add_all(df, fps))  # a false drop would lose a document
    assert all(add_all(df, fps[::97]))
    memory = df.memory()
    per_fingerprint = memory["bytes"] / len(fps)
    print(f"{memory['layers']} layers, {per_fingerprint:.2f} bytes per fingerprint at 200k")
    assert memory["fingerprints"] == 200_000
    assert per_fingerprint <= 24


def test_layers_are_allocated_as_planned(redis_client, redis_namespace):
    df = BloomDupeFilter(redis_namespace, capacity=1000, client=redis_client)
    add_all(df, fingerprints(0, 5000))
    layers = df.memory()["layers"]
    assert layers == 3  # 1000 + 2000 + 4000 >= 5000 (a new layer once the newest is full)
    for i in range(layers):
        planned = layer_plan(1000, 1e-9, 2, i)
        assert redis_client.strlen(f"{redis_namespace}:bloom:{i}") == math.ceil(planned.bits / 8)
    assert df.memory()["bytes"] == bytes_for(5000, 1000, 1e-9, 2)


@pytest.mark.slow  # 50k fingerprints: Redis's CPU, 15 s on a busy machine
def test_redis_memory_per_fingerprint_including_overhead(redis_client, redis_namespace):
    df = BloomDupeFilter(redis_namespace, capacity=50_000, client=redis_client)
    add_all(df, fingerprints(0, 100_000))
    used = sum(
        redis_client.memory_usage(key) or 0
        for key in redis_client.scan_iter(match=f"{redis_namespace}:bloom*")
    )
    assert used / 100_000 <= 24


def test_memory_at_ten_million_fingerprints_meets_the_target():
    """<= 24 bytes per fingerprint at 10 million, at a false-drop rate of 1e-9 per document."""
    per_fingerprint = bytes_for(10_000_000, 100_000, 1e-9, 2) / 10_000_000
    print(f"{per_fingerprint:.2f} bytes per fingerprint at 10 million")
    assert per_fingerprint <= 24
    layers = [layer_plan(100_000, 1e-9, 2, i) for i in range(7)]  # 12.7 million places
    assert sum(layer.capacity for layer in layers) >= 10_000_000
    # the chance that a new fingerprint matches a full layer, summed over the layers
    error = sum(
        (1 - math.exp(-lay.hashes * lay.capacity / lay.bits)) ** lay.hashes for lay in layers
    )
    assert error <= 1e-9


def test_measured_false_positive_rate_matches_the_formula(redis_client, redis_namespace):
    """At a loose rate (1%) the filter's real error rate is what the formula promises."""
    df = BloomDupeFilter(redis_namespace, capacity=20_000, error_rate=0.01, client=redis_client)
    add_all(df, fingerprints(0, 20_000 - 1))  # one full layer
    false = sum(add_all(df, fingerprints(10_000_000, 20_000)))
    layer = layer_plan(20_000, 0.01, 2, 0)
    assert layer.bits / layer.capacity == pytest.approx(
        -math.log(0.005) / math.log(2) ** 2, rel=0.01
    )
    assert false / 20_000 <= 0.005 * 1.5


def test_request_seen_uses_the_crawlers_fingerprinter_with_doc_key(redis_url, redis_namespace):
    crawler = get_crawler(
        settings_dict={
            "ADDONS": ADDONS,
            "REQUEST_FINGERPRINTER_CLASS": "cnkispider.scheduling.fingerprint.DocKeyFingerprinter",
            "SCHEDULER_NAMESPACE": redis_namespace,
            "REDIS_URL": redis_url,
        }
    )
    df = BloomDupeFilter.from_crawler(crawler)
    first = scrapy.Request("https://x/kcms2/article/abstract?v=token1", meta={"doc_key": "CJFQ/A1"})
    same_doc = scrapy.Request(
        "https://x/kcms2/article/abstract?v=token2", meta={"doc_key": "CJFQ/A1"}
    )
    other = scrapy.Request("https://x/kcms2/article/abstract?v=token1", meta={"doc_key": "CJFQ/B2"})
    assert not df.request_seen(first)
    assert df.request_seen(same_doc)
    assert not df.request_seen(other)
    df.client.close()


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="DUPEFILTER_ERROR_RATE"):
        BloomDupeFilter("x", error_rate=0)
    with pytest.raises(ValueError, match="DUPEFILTER_CAPACITY"):
        BloomDupeFilter("x", capacity=0)
