"""scripts/refresh-captures' pure parts: how an old capture's facts become the new run's, and
which broker configuration it reproduces (the broker run itself takes minutes: run the script)."""

from __future__ import annotations

from .refresh import NODE_KEYS, NOT_REQUESTED, Remap, _as_before, capture_static_configs


def test_remap_replaces_known_facts_and_nulls_stale_wall_clock_values() -> None:
    remap = Remap()
    remap.add(1795217135216, 1800000000000)
    remap.add("4352960b-3b2d-4ee5-967c-600d86c5899a", "11111111-2222-3333-4444-555555555555")
    context = {
        "timestamp": 1795217135216,
        "made_at_ms": 1795217135999,  # a fact of the old run this run did not measure
        "topic_ids": {"txn-open": "4352960b-3b2d-4ee5-967c-600d86c5899a"},
        "offset": 3,
        "ok": True,
    }
    assert remap.apply(context) == {
        "timestamp": 1800000000000,
        "made_at_ms": None,
        "topic_ids": {"txn-open": "11111111-2222-3333-4444-555555555555"},
        "offset": 3,
        "ok": True,
    }
    assert remap.text("(2, 0, 2, 1795217135216, 0) at 1795217135999") == (
        "(2, 0, 2, 1800000000000, 0) at null"
    )


def test_a_bitfield_not_requested_keeps_the_old_files_spelling() -> None:
    old = {"groups": [{"authorized_operations": None}, {"authorized_operations": 8}]}
    new = {"groups": [{"authorized_operations": NOT_REQUESTED}, {"authorized_operations": 8}]}
    assert _as_before(new, old) == old
    assert _as_before(new, {"groups": []}) == new


def test_the_capture_brokers_static_configuration_is_reproduced_without_its_addresses() -> None:
    configs = capture_static_configs()
    assert configs["transaction.max.timeout.ms"] == "60000"
    assert configs["transaction.partition.verification.enable"] == "false"
    assert configs["num.partitions"] == "3"
    assert not NODE_KEYS & set(configs)
