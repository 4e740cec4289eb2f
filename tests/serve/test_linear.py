"""The engine's oneDNN linear layers compute what nn.Linear computes, and follow weight updates."""

from __future__ import annotations

import copy

import pytest
import torch

from agentgym.serve import linear

pytestmark = pytest.mark.skipif(not linear.available(torch.device("cpu"), torch.float32),
                                reason="torch was built without oneDNN")


def _layer() -> torch.nn.Linear:
    layer = torch.nn.Linear(2, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2.0], [3.0, -1.0]]))
        layer.bias.copy_(torch.tensor([0.5, 0.0]))
    return layer


def test_a_routed_layer_gives_the_products_of_its_weights() -> None:
    layer = _layer()
    assert linear.install(torch.nn.Sequential(layer)) == 1
    x = torch.tensor([[[1.0, 1.0], [2.0, 0.0]]])  # [batch 1, 2 tokens, 2 features]
    with torch.inference_mode():
        # row (1, 1): 1 + 2 + 0.5 = 3.5 and 3 - 1 = 2; row (2, 0): 2 + 0.5 = 2.5 and 6
        torch.testing.assert_close(layer(x), torch.tensor([[[3.5, 2.0], [2.5, 6.0]]]))


def test_repack_follows_weights_changed_in_place_and_a_copy_uses_its_own() -> None:
    model = torch.nn.Sequential(_layer())
    linear.install(model)
    twin = copy.deepcopy(model)  # as a LoRA merge starts: not routed until installed itself
    with torch.no_grad():
        model[0].weight.mul_(2)  # as a weight update does
        twin[0].weight.zero_()
    linear.repack(model)
    x = torch.tensor([[1.0, 1.0]])
    with torch.inference_mode():
        torch.testing.assert_close(model(x), torch.tensor([[6.5, 4.0]]))  # 2 + 4 + 0.5, 6 - 2
        torch.testing.assert_close(twin(x), torch.tensor([[0.5, 0.0]]))  # the bias alone
