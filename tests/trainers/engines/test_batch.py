"""Rows -> advantages, sequences and micro-batches; packed logprobs equal unpacked ones."""

from __future__ import annotations

import math

import pytest
import torch
from trainer_helpers import with_turn_rewards

from agentgym.rollout.rows import TrajectoryRow, derive_turns, observation_hash
from agentgym.trainers.engines.batch import (
    TrainSequence,
    collate,
    packed_attention_mask,
    plan_micro_batches,
    to_sequences,
)
from agentgym.trainers.losses.advantages import (
    discounted_returns,
    playing_turn_advantages,
    row_advantages,
    token_advantages,
)
from agentgym.trainers.research.options import research_advantages, turn_advantages, turn_credit_share
from agentgym.trainers.research.settings import ExperimentalSettings


def with_research(rows, method="grpo", *, filter_zero_variance=False, filter_uniform_success=False,
                  turn_weight=0.0, turn_discount=0.95):
    """GRPO's per-token advantages with the experimental options, as the GRPO learner computes them."""
    base = token_advantages(rows, method, filter_zero_variance=filter_zero_variance)
    settings = ExperimentalSettings(filter_uniform_success=filter_uniform_success,
                                    turn_advantage_weight=turn_weight, turn_discount=turn_discount)
    return research_advantages(rows, base, settings, method)[0]


def test_advantages_are_relative_to_the_group(make_row) -> None:
    rows = [make_row(reward=1.0, group=0, index=0), make_row(reward=0.0, group=0, index=1),
            make_row(reward=0.3, group=1, index=0), make_row(reward=0.3, group=1, index=1),
            make_row(reward=0.5, group=2, index=0), make_row(reward=0.0, group=2, index=1),
            make_row(reward=1.0, group=2, index=2)]
    advantages = row_advantages(rows, "grpo_no_std")
    assert advantages[:4] == pytest.approx([0.5, -0.5, 0.0, 0.0])
    assert advantages[4:] == pytest.approx([0.0, -0.5, 0.5])  # a group of three: its own mean
    # GRPO scales by the group's sample std: (1 - 0.5) / std([1, 0]) = 0.5 / 0.7071
    assert row_advantages(rows, "grpo")[0] == pytest.approx(0.5 / math.sqrt(0.5), rel=1e-3)


def test_zero_variance_groups_are_skipped_when_asked(make_row) -> None:
    rows = [make_row(reward=0.3, group=0, index=0), make_row(reward=0.3, group=0, index=1),
            make_row(reward=1.0, group=1, index=0), make_row(reward=0.0, group=1, index=1)]
    assert row_advantages(rows, filter_zero_variance=True)[:2] == [None, None]
    assert row_advantages(rows, filter_zero_variance=False)[:2] == [0.0, 0.0]


def test_groups_that_all_won_or_all_lost_are_skipped_when_asked(make_row) -> None:
    """Rewards with a cost per turn differ inside a group that all won (or all lost): the
    zero-variance filter keeps it, the outcome filter skips it; a mixed group stays."""
    rows = [make_row(reward=0.9, group=0, index=0), make_row(reward=0.7, group=0, index=1),
            make_row(reward=0.3, group=1, index=0), make_row(reward=0.1, group=1, index=1),
            make_row(reward=1.0, group=2, index=0), make_row(reward=0.0, group=2, index=1)]
    assert [row.success for row in rows] == [True, True, False, False, True, False]
    assert None not in row_advantages(rows, "dr_grpo", filter_zero_variance=True)
    outcome = with_research(rows, "dr_grpo", filter_uniform_success=True)
    assert outcome[:4] == [None] * 4 and [set(tokens) - {0.0} for tokens in outcome[4:]] == [{0.5}, {-0.5}]
    tokens = with_research(rows, "dr_grpo", filter_zero_variance=True, filter_uniform_success=True)
    assert tokens[:4] == [None] * 4 and all(value in (0.0, 0.5) for value in tokens[4])


def test_rows_of_one_episode_share_its_advantage(make_row) -> None:
    first, second = make_row(reward=1.0, index=0), make_row(reward=1.0, index=0, row_index=1)
    other = make_row(reward=0.0, index=1)
    advantages = row_advantages([first, second, other], "grpo_no_std")
    assert advantages == pytest.approx([0.5, 0.5, -0.5])


def test_rollout_logprobs_known_only_from_a_server(make_row) -> None:
    """A sequence's importance correction uses the row's logprobs only when the row says they are the
    server's; files written before rows said so derive it: not retokenized, and non-zero."""
    served, model_free = make_row(logprob=-0.3), make_row(logprob=0.0)
    assert served.server_logprobs and not model_free.server_logprobs
    unknown = served.model_copy(update={"server_logprobs": False})  # e.g. an expert-replaced turn's zeros
    sequences = to_sequences([served, model_free, unknown], [1.0, 1.0, 1.0])
    assert [s.has_rollout_logprobs for s in sequences] == [True, False, False]
    old = [row.to_record() for row in (served, model_free, served.model_copy(update={"retokenized": True}))]
    assert [record["server_logprobs"] for record in derive_turns(old)] == [True, False, False]


def test_sequences_skip_rows_that_cannot_teach(make_row) -> None:
    good = make_row()
    no_sampled = good.model_copy(update={"completion_mask": [0] * len(good.completion_mask)})
    no_prompt = good.model_copy(update={"prompt_ids": []})
    sequences = to_sequences([good, no_sampled, no_prompt, good], [1.0, 1.0, 1.0, None])
    assert len(sequences) == 1
    (sequence,) = sequences
    assert sequence.input_ids == good.prompt_ids + good.completion_ids
    assert sequence.loss_mask == good.completion_mask  # env tokens (mask 0) carry no loss
    assert sequence.has_rollout_logprobs and sequence.advantages == [1.0] * len(good.completion_ids)


def test_sequences_are_cut_to_the_max_length(make_row) -> None:
    row = make_row()
    keep = 3
    (sequence,) = to_sequences([row], [1.0], max_length=len(row.prompt_ids) + keep)
    assert sequence.completion_length == keep and len(sequence.loss_mask) == keep
    assert to_sequences([row], [1.0], max_length=len(row.prompt_ids)) == []


def _runs_of_one(mask: list[int]) -> list[tuple[int, int]]:
    runs, start = [], None
    for index, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = index
        elif not bit and start is not None:
            runs.append((start, index))
            start = None
    return runs


def _observations(row: TrajectoryRow) -> list[str]:
    """What the policy had just read before each of its turns: the env's last message."""
    seen, last = [], ""
    for message in row.messages:
        if message.role == "assistant":
            seen.append(last)
        elif message.role == "user":
            last = message.content
    return seen


def test_a_rows_turns_are_its_sampled_runs_with_the_observation_each_acted_on(stall_rows) -> None:
    for row in stall_rows:
        assert [(t.start, t.end) for t in row.turns] == _runs_of_one(row.completion_mask)
        assert [t.turn for t in row.turns] == list(range(row.num_turns))
        assert [t.observation_hash for t in row.turns] == [observation_hash(o) for o in _observations(row)]


def test_rows_of_old_files_get_the_same_turns_derived(stall_rows) -> None:
    """A file written before rows kept their turns: runs of sampled tokens, numbered across an
    episode's rows, each with the last observation before its assistant message."""
    records = [row.model_dump(exclude={"turns", "server_logprobs"}) for row in stall_rows]
    derived = derive_turns(records)
    assert [record["turns"] for record in derived] == [[t.model_dump() for t in row.turns] for row in stall_rows]
    assert derive_turns([{**records[0], "completion_mask": [0] * len(records[0]["completion_mask"])}])[0]["turns"] == []


def _sampled(row: TrajectoryRow, values: list[float]) -> list[list[float]]:
    """Each turn's advantages, from a row's per-token list."""
    return [values[t.start:t.end] for t in row.turns]


def test_without_turn_weight_every_sampled_token_gets_its_episodes_advantage(stall_rows) -> None:
    per_episode = row_advantages(stall_rows, "grpo")
    for row, advantage, tokens in zip(stall_rows, per_episode, token_advantages(stall_rows, "grpo")):
        assert tokens == [advantage if sampled else 0.0 for sampled in row.completion_mask]


def test_turns_from_the_same_observation_are_compared_by_their_return(stall_rows) -> None:
    solver, late, stuck = stall_rows
    seen = [[t.observation_hash for t in row.turns] for row in stall_rows]
    assert seen[0][0] == seen[1][0] == seen[2][0]
    assert seen[1][1] == seen[1][2] == seen[2][1]  # after a stall
    turns = turn_advantages(stall_rows, "dr_grpo", discount=0.9)
    # The first turn: all three acted on the level as dealt; dr_grpo centres their returns.
    first = [discounted_returns(row.turn_rewards, 0.9)[0] for row in stall_rows]
    mean = sum(first) / 3
    assert [turns[row.episode_id][0] for row in stall_rows] == pytest.approx([r - mean for r in first])
    assert turns[solver.episode_id][0] > turns[late.episode_id][0] > turns[stuck.episode_id][0]
    # After a stall: the move that left it (the late episode's turn 2) beats staying (its turn 1),
    # and both beat the stuck episode's stalls, which never left.
    late_turns = turns[late.episode_id]
    assert late_turns[2] > late_turns[1] > max(turns[stuck.episode_id][1:])
    # States only one turn reached (the solver's path after its first move) have nothing to compare.
    assert turns[solver.episode_id][1:] == [0.0] * (solver.num_turns - 1)


def test_the_credit_share_counts_the_turns_that_had_a_state_to_share(stall_rows) -> None:
    solver, late, stuck = stall_rows
    turns = turn_advantages(stall_rows, "dr_grpo", discount=0.9)
    # Credited: every first turn, the late episode's stalls and way out, the stuck one's stalls.
    # Not: the solver's path after its first move, which the late episode walked too with the
    # same future (same state, same return: nothing to tell apart).
    credited = 3 + 2 + (stuck.num_turns - 1)
    assert turn_credit_share(turns) == pytest.approx(credited / (solver.num_turns + late.num_turns + stuck.num_turns))
    assert turn_credit_share({}) == 0.0


def test_gigpo_tokens_add_their_turns_advantage_to_the_episodes(stall_rows) -> None:
    episode = row_advantages(stall_rows, "grpo")
    turns = turn_advantages(stall_rows, "grpo", discount=0.95)
    combined = with_research(stall_rows, "grpo", turn_weight=0.5, turn_discount=0.95)
    for row, advantage, tokens in zip(stall_rows, episode, combined):
        assert tokens is not None and len(tokens) == len(row.completion_ids)
        for turn, values in enumerate(_sampled(row, tokens)):
            assert values == pytest.approx([advantage + 0.5 * turns[row.episode_id][turn]] * len(values))
        assert all(value == 0.0 for value, sampled in zip(tokens, row.completion_mask) if not sampled)
    # Episode level alone, the late episode's stall and its way out are credited alike;
    # with the turn level, leaving the stall is worth more than staying in it.
    late = _sampled(stall_rows[1], combined[1])
    assert late[2][0] > late[1][0]


def test_an_episode_split_into_rows_keeps_its_turns_in_order(stall_rows) -> None:
    late = stall_rows[1]
    cut = late.turns[2].start  # the second row starts at turn 2, its turns numbered on across the rows
    head = late.model_copy(update={"completion_ids": late.completion_ids[:cut], "turns": late.turns[:2],
                                   "completion_mask": late.completion_mask[:cut], "logprobs": late.logprobs[:cut]})
    tail = late.model_copy(update={
        "row_index": 1, "prompt_ids": late.prompt_ids + late.completion_ids[:cut],
        "completion_ids": late.completion_ids[cut:], "completion_mask": late.completion_mask[cut:],
        "logprobs": late.logprobs[cut:],
        "turns": [t.model_copy(update={"start": t.start - cut, "end": t.end - cut}) for t in late.turns[2:]]})
    assert [t.turn for t in tail.turns] == list(range(2, late.num_turns))
    whole = with_research(stall_rows, "grpo", turn_weight=1.0)[1]
    split = with_research([stall_rows[0], head, tail, stall_rows[2]], "grpo", turn_weight=1.0)
    assert split[1] + split[2] == whole


def test_an_episode_whose_turns_do_not_match_its_tokens_gets_its_episode_advantage(stall_rows) -> None:
    broken = stall_rows[1].model_copy(update={"turn_rewards": stall_rows[1].turn_rewards[:-1]})
    rows = [stall_rows[0], broken, stall_rows[2]]
    assert turn_advantages(rows)[broken.episode_id] == [0.0] * (broken.num_turns - 1)
    episode = row_advantages(rows, "grpo")[1]
    tokens = with_research(rows, "grpo", turn_weight=1.0)[1]
    assert {value for value, sampled in zip(tokens, broken.completion_mask) if sampled} == {episode}


def test_groups_with_nothing_to_teach_are_skipped_at_both_levels(stall_rollout) -> None:
    same = stall_rollout([0, 0], seed=12)  # two identical solver episodes
    assert token_advantages(same, filter_zero_variance=True) == [None, None]
    assert with_research(same, filter_zero_variance=True, turn_weight=1.0) == [None, None]
    # Equal episode rewards, but one episode reached the reward sooner: the turn level still teaches.
    sooner = [with_turn_rewards(same[0], [1.0, 0.0]), with_turn_rewards(same[1], [0.0, 1.0])]
    assert token_advantages(sooner, filter_zero_variance=True) == [None, None]
    kept = with_research(sooner, "dr_grpo", filter_zero_variance=True, turn_weight=1.0, turn_discount=0.5)
    assert kept[0] is not None and kept[1] is not None
    first_turn = [_sampled(row, tokens)[0][0] for row, tokens in zip(sooner, kept)]
    assert first_turn == pytest.approx([0.25, -0.25])  # returns 1 and 0.5 against their mean


def test_the_turn_baseline_compares_each_turn_with_the_episodes_still_playing(stall_rows) -> None:
    solver, late, stuck = stall_rows  # won soonest, won later, failed at the turn limit
    playing = playing_turn_advantages(stall_rows, "dr_grpo")
    returns = [discounted_returns(row.turn_rewards, 1.0) for row in stall_rows]
    assert playing[solver.episode_id][0] == pytest.approx(returns[0][0] - (returns[1][0] + returns[2][0]) / 2)
    # After the late episode won, the failed one plays on alone: its baseline stays the last one it had.
    last_shared = late.num_turns - 1
    tail = playing[stuck.episode_id][late.num_turns:]
    alone = range(late.num_turns, stuck.num_turns)
    assert tail == pytest.approx([returns[2][t] - returns[1][last_shared] for t in alone])
    for turn in range(solver.num_turns):  # all three play these turns
        assert sum(playing[row.episode_id][turn] for row in stall_rows) == pytest.approx(0.0, abs=1e-9)
    tokens = token_advantages(stall_rows, "dr_grpo", baseline="turn")
    for row, values in zip(stall_rows, tokens):
        assert values is not None
        for turn, sampled in enumerate(_sampled(row, values)):
            assert sampled == pytest.approx([playing[row.episode_id][turn]] * len(sampled))
        assert all(value == 0.0 for value, mask in zip(values, row.completion_mask) if not mask)


def test_the_turn_baseline_with_grpo_is_scaled_by_the_groups_reward_spread(stall_rows) -> None:
    plain = playing_turn_advantages(stall_rows, "dr_grpo")
    scaled = playing_turn_advantages(stall_rows, "grpo")
    spread = float(torch.tensor([row.reward for row in stall_rows], dtype=torch.float64).std())
    for row in stall_rows:
        assert scaled[row.episode_id] == pytest.approx([v / (spread + 1e-4) for v in plain[row.episode_id]])


def test_the_turn_baseline_keeps_the_filters_and_the_unmatched_episodes(stall_rows, stall_rollout) -> None:
    same = stall_rollout([0, 0], seed=12)
    assert token_advantages(same, filter_zero_variance=True, baseline="turn") == [None, None]
    broken = stall_rows[1].model_copy(update={"turn_rewards": stall_rows[1].turn_rewards[:-1]})
    rows = [stall_rows[0], broken, stall_rows[2]]
    assert broken.episode_id not in playing_turn_advantages(rows)
    tokens = token_advantages(rows, "grpo", baseline="turn")[1]
    episode = row_advantages(rows, "grpo")[1]
    assert {value for value, sampled in zip(tokens, broken.completion_mask) if sampled} == {episode}


def test_packing_fills_bins_without_overflow() -> None:
    lengths = [7, 3, 9, 2, 5, 5, 12]
    bins = plan_micro_batches(lengths, pack=True, micro_batch_tokens=10, micro_batch_size=99)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    for b in bins:
        assert sum(lengths[i] for i in b) <= 10 or len(b) == 1  # only an oversized one stands alone
    padded = plan_micro_batches(lengths, pack=False, micro_batch_tokens=99, micro_batch_size=3)
    assert [len(b) for b in padded] == [3, 3, 1]
    # Padded to its longest: 12 alone (2 x 12 > 20), then 9 and 7 (18 tokens), 5, 5 and 3 (15; a
    # fourth would pass micro_batch_size), then 2.
    budget = plan_micro_batches(lengths, pack=False, micro_batch_tokens=20, micro_batch_size=3)
    assert [[lengths[i] for i in b] for b in budget] == [[12], [9, 7], [5, 5, 3], [2]]


def test_packed_mask_keeps_sequences_apart() -> None:
    segments = torch.tensor([[0, 0, 1, 1, 1, -1]])
    mask = packed_attention_mask(segments)[0, 0]
    assert mask[1].tolist() == [True, True, False, False, False, False]
    assert mask[4].tolist() == [False, False, True, True, True, False]
    assert mask[5].tolist() == [False] * 5 + [True]  # padding sees only itself: no empty softmax row
    additive = packed_attention_mask(segments, dtype=torch.float32)[0, 0]
    assert additive[1, 2] == torch.finfo(torch.float32).min and additive[1, 0] == 0


def _reference_logprobs(model, sequence: TrainSequence) -> torch.Tensor:
    """Each sequence alone through the model: what packing and padding must reproduce."""
    logits = model(torch.tensor([sequence.input_ids])).logits[0].log_softmax(-1)
    p = sequence.prompt_length
    return torch.stack([logits[p + j - 1, sequence.input_ids[p + j]] for j in range(sequence.completion_length)])


@pytest.mark.parametrize("pack", [True, False])
def test_packed_and_padded_logprobs_match_each_sequence_alone(tiny_model: str, pack: bool) -> None:
    from agentgym.trainers.engines.distributed import Dist
    from agentgym.trainers.engines.native import NativeEngine
    from agentgym.trainers.settings import TrainConfig

    engine = NativeEngine(TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "model": tiny_model}), Dist())
    model = engine.model
    generator = torch.Generator().manual_seed(0)
    sequences = []
    for prompt, completion in [(5, 3), (9, 6), (4, 2), (7, 1)]:
        ids = torch.randint(0, 1000, (prompt + completion,), generator=generator).tolist()
        sequences.append(TrainSequence(ids, prompt, [1] * completion, [0.0] * completion, False, [1.0] * completion))
    batch = collate(sequences, pack=pack, pad_id=0)
    assert batch.input_ids.shape[0] == (1 if pack else len(sequences))
    with torch.no_grad():
        logprobs, entropy = engine.logprobs(batch, with_entropy=True)
        for s, sequence in enumerate(sequences):
            n = sequence.completion_length
            torch.testing.assert_close(logprobs[s, :n], _reference_logprobs(model, sequence), atol=1e-5, rtol=0)
    assert entropy is not None and bool((entropy[batch.loss_mask > 0] > 0).all())
    # The LM head ran only where a sampled token is predicted, and at each sequence's last token. Padded
    # rows are padded on the left, so their completions line up: the longest completion's positions.
    longest = max(s.completion_length for s in sequences)
    assert batch.keep.numel() == (sum(s.completion_length + 1 for s in sequences) if pack else longest + 1)
