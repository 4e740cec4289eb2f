"""The batch's KV cache: appending writes in place, joining and leaving keep every row's values."""

from __future__ import annotations

import torch

from agentgym.serve import kv


def _kv(rows: int, columns: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, 2, columns, 4, generator=generator),
            torch.randn(rows, 2, columns, 4, generator=generator))


def test_a_decode_step_writes_its_column_into_spare_room_without_moving_the_cache() -> None:
    layer = kv.SlackLayer()
    keys, values = _kv(3, 10, seed=0)
    layer.update(keys, values)
    buffer = layer.keys.data_ptr()
    appended = [keys]
    for step in range(kv.slack(10)):  # every step fits the room the first update left
        step_keys, step_values = _kv(3, 1, seed=step + 1)
        got_keys, got_values = layer.update(step_keys, step_values)
        appended.append(step_keys)
        assert got_keys.data_ptr() == buffer
    torch.testing.assert_close(got_keys, torch.cat(appended, dim=-2))
    assert got_values.shape == got_keys.shape
    layer.update(*_kv(3, 1, seed=99))  # one past the room: moved, and still every column
    assert layer.keys.shape[-2] == 10 + kv.slack(10) + 1
    torch.testing.assert_close(layer.keys[..., :-1, :], torch.cat(appended, dim=-2))


def test_a_layer_whose_keys_were_replaced_appends_to_the_replacement() -> None:
    layer = kv.SlackLayer()
    layer.update(*_kv(3, 5, seed=0))
    layer.batch_select_indices(torch.tensor([2, 0]))  # transformers' own row selection
    kept = layer.keys.clone()
    step_keys, step_values = _kv(2, 1, seed=1)
    got_keys, _ = layer.update(step_keys, step_values)
    torch.testing.assert_close(got_keys, torch.cat([kept, step_keys], dim=-2))


def test_joined_rows_are_right_aligned_with_zeros_on_their_left() -> None:
    old_keys, old_values = _kv(2, 6, seed=0)
    new_keys, new_values = _kv(3, 9, seed=1)
    running = kv.wrap([(old_keys, old_values)], 6)
    new = kv.wrap([(new_keys, new_values)], 9)
    cache, mask = kv.join(running, torch.ones(2, 6, dtype=torch.long), new, torch.ones(3, 9, dtype=torch.long))
    ((keys, values),) = kv.layers(cache)
    assert keys.shape == (5, 2, 9, 4) and mask.tolist()[0] == [0, 0, 0] + [1] * 6
    torch.testing.assert_close(keys[:2, :, 3:], old_keys)
    assert keys[:2, :, :3].abs().sum() == 0
    torch.testing.assert_close(keys[2:], new_keys)
    torch.testing.assert_close(values[:2, :, 3:], old_values)


def test_leaving_rows_keeps_the_others_and_cuts_the_columns_none_of_them_uses() -> None:
    keys, values = _kv(3, 8, seed=0)
    mask = torch.ones(3, 8, dtype=torch.long)
    mask[0, :5] = 0  # row 0 is the shortest: 3 tokens
    mask[2, :2] = 0  # row 2: 6 tokens
    cache, kept_mask = kv.keep_rows(kv.wrap([(keys, values)], 8), mask, [2, 0])
    ((kept_keys, kept_values),) = kv.layers(cache)
    assert kept_mask.tolist() == [[1] * 6, [0, 0, 0, 1, 1, 1]]
    torch.testing.assert_close(kept_keys, keys[[2, 0], :, 2:])
    torch.testing.assert_close(kept_values, values[[2, 0], :, 2:])
    cache, untrimmed = kv.keep_rows(kv.wrap([(keys, values)], 8), mask, [0], trim=False)
    assert untrimmed.shape == (1, 8)
    torch.testing.assert_close(kv.layers(cache)[0][0], keys[[0]])


def test_leaving_rows_in_place_moves_the_last_rows_into_their_places() -> None:
    keys, values = _kv(4, 8, seed=0)
    mask = torch.ones(4, 8, dtype=torch.long)
    mask[1, :3] = 0  # row 1: 5 tokens; rows 0 and 2 (the longest) leave
    mask[3, :2] = 0  # row 3: 6 tokens
    cache = kv.wrap([(keys, values)], 8)
    moved = kv.drop_rows(cache, mask, {0, 2})
    assert moved is not None
    kept_mask, order = moved
    assert order == [3, 1]  # row 3 took row 0's place; row 1 stayed
    assert kept_mask.tolist() == [[1] * 6, [0, 1, 1, 1, 1, 1]]  # the 2 columns neither uses are cut
    ((kept_keys, kept_values),) = kv.layers(cache)
    expected_keys, expected_values = _kv(4, 8, seed=0)
    torch.testing.assert_close(kept_keys, expected_keys[[3, 1], :, 2:])
    torch.testing.assert_close(kept_values, expected_values[[3, 1], :, 2:])
    step_keys, step_values = _kv(2, 1, seed=5)
    got_keys, _ = cache.layers[0].update(step_keys, step_values)  # a decode step writes the kept rows only
    torch.testing.assert_close(got_keys, torch.cat([expected_keys[[3, 1], :, 2:], step_keys], dim=-2))


def test_rows_join_in_place_when_the_buffers_have_room() -> None:
    old_keys, old_values = _kv(2, 6, seed=0)
    running, mask = kv.join(kv.wrap([(old_keys, old_values)], 6), torch.ones(2, 6, dtype=torch.long),
                            kv.wrap([_kv(1, 6, seed=1)], 6), torch.ones(1, 6, dtype=torch.long))
    assert running.layers[0].spare_rows == 4  # a join leaves room for at least 4 more rows
    new_keys, new_values = _kv(1, 4, seed=2)
    cache, mask = kv.join(running, mask, kv.wrap([(new_keys, new_values)], 4), torch.ones(1, 4, dtype=torch.long))
    assert cache is running and mask.tolist()[3] == [0, 0, 1, 1, 1, 1]
    ((keys, values),) = kv.layers(cache)
    assert keys.shape == (4, 2, 6, 4)
    torch.testing.assert_close(keys[:2], old_keys)
    torch.testing.assert_close(keys[3, :, 2:], new_keys[0])
    torch.testing.assert_close(values[3, :, 2:], new_values[0])
    assert keys[3, :, :2].abs().sum() == 0 and values[3, :, :2].abs().sum() == 0
