"""Strategies reach the boundary cases and shrink to simple ones (STYLE 12)."""
from __future__ import annotations

import pytest
from hypothesis import find, settings

from oracle.config import Geometry
from invariants import kda_checks as kc
from invariants.matrix import case_of, case_to_json
from strategies.sequences import chunk_splits, packed_lengths, sequence_lengths

FIND = settings(max_examples=2000, database=None)


@pytest.mark.parametrize("n", [1, 4, 5, 63, 64, 65, 128, 129])
def test_sequence_lengths_reach_every_boundary(n):
    assert find(sequence_lengths(), lambda x: x == n, settings=FIND) == n


def test_sequence_lengths_shrink_to_the_smallest_failing_length():
    assert find(sequence_lengths(), lambda x: x > 64, settings=FIND) == 65


def test_chunk_splits_sum_to_the_total_and_shrink_to_two_parts_with_a_one_token_tail():
    parts = find(chunk_splits(130), lambda p: len(p) >= 2, settings=FIND)
    assert parts == (129, 1)


def test_chunk_splits_reach_a_cut_off_the_chunk_grid():
    parts = find(chunk_splits(129), lambda p: len(p) >= 2 and p[0] == 63, settings=FIND)
    assert parts[0] == 63


def test_chunk_splits_shrink_every_cut_to_a_one_token_part():
    assert find(chunk_splits(3), lambda p: len(p) == 3, settings=FIND) == (1, 1, 1)


def test_left_pads_keep_the_last_rows_draws_so_a_padded_row_survives_a_smaller_batch():
    from strategies.sequences import left_pads
    pads = find(left_pads(1, 5), lambda p: p[0] > 0, settings=FIND)
    assert pads == (1,)
    assert find(left_pads(2, 3, max_pad=9), lambda p: p[0] == 2, settings=FIND) == (2, 0)


def test_path_cases_shrink_to_the_smallest_stream_batch_and_padding():
    # the kda, mla and model path strategies share chunk_splits and left_pads (one of them is enough)
    case = find(kc.sublayer_cases(Geometry.preset("tiny")), lambda c: len(c.splits) >= 2 and any(c.left_pad),
                settings=FIND)
    assert (case.batch, case.length, case.left_pad, case.splits, case.initial_state, case.seed) == \
        (1, 2, (1,), (1, 1), False, 0), case


def test_checkpoint_depths_reach_past_two_chunks_off_the_grid():
    from invariants import kda_checkpoint_checks as kcc
    case = find(kcc.checkpoint_cases(Geometry.preset("tiny")), lambda c: c.depth % 64 and c.depth > 128,
                settings=FIND)
    assert case.depth % 64 and case.depth > 128


def test_packed_lengths_reach_zero_length_and_one_token_documents():
    docs = find(packed_lengths(), lambda d: 0 in d and 1 in d, settings=FIND)
    assert 0 in docs and 1 in docs and sum(docs) > 0


@pytest.mark.parametrize("what", [
    lambda c: c.family == "checkpoint_bias" and c.experts == 288 and c.tokens == 1,
    lambda c: c.family == "underflow" and c.experts == 288 and c.top_k == 8,
    lambda c: c.family == "group_tie" and c.groups == 8 and c.topk_group == 4,
    lambda c: c.family == "negative_kept" and c.topk_group < c.groups and c.tokens >= 64,
], ids=["checkpoint_bias_M1_released_router", "underflow_top8", "group_tie_dsv3_groups", "negative_kept_large_M"])
def test_route_cases_reach_the_routing_boundaries(what):
    from invariants.moe_checks import route_cases
    assert what(find(route_cases(Geometry.preset("tiny")), what, settings=FIND))


def test_route_cases_shrink_to_one_token_of_the_tiny_router():
    from invariants.moe_checks import route_cases
    c = find(route_cases(Geometry.preset("tiny")), lambda c: c.family == "negative_kept", settings=FIND)
    assert (c.tokens, c.experts, c.groups, c.topk_group, c.top_k) == (1, 8, 2, 1, 1)


def test_cases_round_trip_through_json():
    tiny = Geometry.preset("tiny")
    for strat in (kc.core_cases(tiny), kc.sublayer_cases(tiny), kc.packed_cases(tiny), kc.decode_cases(tiny)):
        case = find(strat, lambda c: True, settings=FIND)
        assert case_of(case_to_json(case)) == case


@pytest.mark.parametrize("call, match", [
    (lambda: sequence_lengths(min_len=5, max_len=2), "min_len=5 > max_len=2"),
    (lambda: sequence_lengths(min_len=-1), "min_len"),
    (lambda: sequence_lengths(max_len=1.5), "max_len"),
    (lambda: find(chunk_splits(0), bool), "total"),
    (lambda: find(packed_lengths(max_docs=0), bool), "max_docs"),
    (lambda: case_of({"type": "Nope"}), "case type"),
    (lambda: case_of({"type": "CoreCase", "heads": 1}), "missing fields"),
], ids=["sequence_lengths(min_len=5, max_len=2)", "sequence_lengths(min_len=-1)",
        "sequence_lengths(max_len=1.5)", "chunk_splits(0)", "packed_lengths(max_docs=0)",
        "case_from_json(unknown type)", "case_from_json(missing fields)"])
def test_bad_strategy_arguments_are_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_a_case_recorded_before_a_defaulted_field_existed_still_replays():
    """IndexCase gained `holes` (default ()): a failure recorded without it is read with the default, and
    leaving out a field without a default is still refused (above)."""
    from invariants.dsa_checks import G0, IndexCase
    case = IndexCase(G0, 1, 5, 5, (0,), "none", "normal", 0)
    d = case_to_json(case)
    del d["holes"]
    assert case_of(d) == case and case_of(d).holes == ()
    del d["seed"]
    with pytest.raises(ValueError, match=r"missing fields \['seed'\]"):
        case_of(d)


# a legal geometry whose dimensions differ from the preset "tiny" everywhere a strategy reads one (values
# outside the sets the strategies mix in: hc_mult 3, 12 experts, expert width 80, 3 heads of 16, ...)
FAR = Geometry.from_dict({**Geometry.preset("tiny").to_dict(), "linear_num_heads": 3, "linear_head_dim": 16,
                          "linear_conv_kernel_dim": 3, "index_kpool": 8, "index_topk": 16,
                          "linear_lower_bound": None, "hc_mult": 3, "index_n_heads": 4, "index_head_dim": 16,
                          "num_attention_heads": 3, "num_key_value_heads": 3, "qk_nope_head_dim": 16,
                          "v_head_dim": 16, "n_shared_experts": 2, "num_experts_per_tok": 3,
                          "n_routed_experts": 12, "moe_intermediate_size": 80})
# the NVFP4 format checks draw blocks of 16 values and rows of any length: no geometry has a say in them
GEOMETRY_FREE = {"nvfp4.quantize", "nvfp4.dequantize", "nvfp4.rerun"}


def _drawn(chk, geometry, n=30):
    """The first n cases a fixed seed draws (the same seed: a strategy blind to its geometry repeats them)."""
    from hypothesis import HealthCheck, given, seed
    out = []

    @seed(0)
    @settings(max_examples=n, database=None, suppress_health_check=list(HealthCheck), deadline=None)
    @given(chk.cases(geometry))
    def draw(case):
        out.append(case)
    draw()
    return out


@pytest.mark.parametrize("name", [c.name for c in __import__("invariants.matrix", fromlist=["CHECKS"]).CHECKS])
def test_every_check_draws_its_cases_from_the_geometry_given(name):
    """`glmgate run --config` judges the config given: a strategy that ignores its geometry (serving's
    did: every program ran on the preset tiny) draws the same cases for any config. With the same seeds,
    a far-off geometry must change some drawn case."""
    from invariants.matrix import BY_NAME
    chk = BY_NAME[name]
    same = _drawn(chk, Geometry.preset("tiny")) == _drawn(chk, FAR)
    assert same == (name in GEOMETRY_FREE), f"{name}: the cases drawn for another geometry are " \
        f"{'the same' if same else 'different'}"
