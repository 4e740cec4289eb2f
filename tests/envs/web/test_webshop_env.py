"""WebShop-LLM-v0: a shopper that follows the instruction wins; random play never breaks it."""

from __future__ import annotations

import gc
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import agentgym  # noqa: F401  (registers the ids)
from agentgym.envs.web.env import WebShopEnv
from agentgym.errors import ConfigError, ResetNeeded
from fakes import make_game, refuses
from web_shopper import shop

ID = "WebShop-LLM-v0"
make = partial(make_game, ID, WebShopEnv)


@pytest.fixture(scope="module")
def env() -> WebShopEnv:
    shared = make()
    yield shared
    shared.close()


@pytest.mark.parametrize("seed", range(30))
def test_a_shopper_that_follows_the_instruction_gets_reward_1(env: WebShopEnv, seed: int) -> None:
    episode = shop(env, seed, wrap=seed % 2 == 0)  # bare actions and <answer> tags alike
    assert episode.success and episode.reward == 1.0 and episode.done
    purchase = episode.infos[-1]["purchase"]
    assert len(purchase) == 1 and purchase[0]["product"] in {
        p.id for p in env.app.catalog.products if p.price <= env.goal.max_price}
    assert "You bought it. It is exactly what was asked for. Reward: 1.000." in episode.observations[-1]


def test_buying_the_wrong_options_scores_by_parts(env: WebShopEnv) -> None:
    env.reset(seed=3)
    goal = env.goal
    env.browser.open(f"/product/{goal.target}")  # straight to the product the goal was drawn from
    name, wanted = goal.options[0]
    other = next(v for option, values in env.app.catalog.products[goal.target].options
                 if option == name for v in values if v != wanted)
    env.step(f"select[{name}={other}]")
    for option, value in goal.options[1:]:
        env.step(f"select[{option}={value}]")
    _, reward, terminated, _, info = env.step("buy")
    parts = len(goal.attributes) + len(goal.options) + 1
    assert terminated and not info["success"]
    assert reward == pytest.approx((parts - 1) / parts)
    assert info["purchase"][0]["options_matched"] == len(goal.options) - 1


def test_cart_checkout_is_a_purchase_too(env: WebShopEnv) -> None:
    env.reset(seed=4)
    goal = env.goal
    env.browser.open(f"/product/{goal.target}")
    for option, value in goal.options:
        env.step(f"select[{option}={value}]")
    _, _, terminated, _, _ = env.step("click[Add to cart]")
    assert not terminated and "Cart (1)" in env.browser.view()
    _, reward, terminated, _, info = env.step("<answer>buy</answer>")  # on the cart page: checkout
    assert terminated and info["success"] and reward == 1.0


@pytest.mark.parametrize(("action", "message"), [
    ("I am not sure what to do here.",
     "Invalid action: write one action: search[words], click[N], select[option], back or buy"),
    ("click[42]", "Invalid action: there is no link or button [42] on this page (they go from 1 to 13)"),
    ("select[M]", "Invalid action: this page has no options to select."),
    ("search[]", "Invalid action: search[...] needs something inside the brackets."),
    ("search[" + "x" * 201 + "]", "Invalid action: keep searches under 200 characters."),
    ("back", "Invalid action: there is no previous page to go back to."),
    ("buy", "Invalid action: this page has no 'Buy now' or 'Checkout' button."),
    ("open[http://127.0.0.1:1/]", "Invalid action: write one action"),
    ("<answer>dance</answer>", "Invalid action: write one action"),
])
def test_bad_actions_are_feedback(env: WebShopEnv, action: str, message: str) -> None:
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step(action)
    assert info["action_valid"] is False and reward == pytest.approx(-0.1)
    assert not terminated and not truncated
    assert observation.startswith(message)
    assert "Welcome to the AgentGym Shop" in observation  # the page is shown again


def test_buy_without_options_shows_what_is_missing(env: WebShopEnv) -> None:
    env.reset(seed=5)
    env.browser.open(f"/product/{env.goal.target}")
    observation, reward, terminated, _, info = env.step("buy")
    assert info["action_valid"] and not terminated and reward == 0.0
    assert "(HTTP status 400)" in observation and "Please choose a" in observation


def test_not_buying_by_the_turn_limit_scores_0() -> None:
    env = make(max_turns=3)
    env.reset(seed=0)
    for _ in range(3):
        _, reward, terminated, truncated, _ = env.step("search[shirt]")
    assert truncated and not terminated and reward == 0.0
    env.close()


def test_first_observation_is_the_instruction_and_the_home_page(env: WebShopEnv) -> None:
    observation, info = env.reset(seed=1)
    assert observation.startswith(f"Instruction: {env.goal.text}\n\nHome | AgentGym Shop\n")
    assert info["instruction"] == env.goal.text
    assert "127.0.0.1" not in observation  # envs on other ports see the same text


def test_same_seed_same_observations_across_instances() -> None:
    first, second = make(), make()
    assert first.server is None  # nothing starts before the first reset
    assert first.reset(seed=9)[0] == second.reset(seed=9)[0]
    assert first.server.port != second.server.port
    assert first.step("click[4]")[0] == second.step("click[4]")[0]
    first.close()
    second.close()


def test_server_binds_loopback_and_stops_on_close() -> None:
    env = make()
    env.reset(seed=0)
    port = env.server.port
    assert env.server._httpd.server_address[0] == "127.0.0.1"
    env.close()
    assert refuses(port)
    with pytest.raises(ResetNeeded, match="needs reset"):
        env.step("back")
    env.reset(seed=0)  # starts again on a new port
    assert env.step("click[4]")[3] is False
    env.close()
    env.close()  # twice is fine


def test_a_dropped_env_stops_its_server() -> None:
    env = make()
    env.reset(seed=0)
    port = env.server.port
    del env
    gc.collect()
    assert refuses(port)


def test_check_env_passes() -> None:
    env = make()
    check_env(env)
    env.close()


def test_random_policy_plays_many_seeds_without_breaking() -> None:
    env = make(max_turns=30)
    rng = np.random.default_rng(0)
    purchases = 0
    for seed in range(40):
        env.reset(seed=seed)
        for _ in range(env.max_turns):
            observation, reward, terminated, truncated, info = env.step(env.random_action(rng))
            assert isinstance(observation, str) and np.isfinite(reward)
            if terminated or truncated:
                break
        purchases += "purchase" in info
    assert purchases > 0  # random clicks do reach a purchase now and then
    env.close()


_ACTIONS = st.one_of(
    st.text(max_size=80),
    st.builds(lambda name, arg: f"{name}[{arg}]",
              st.sampled_from(["search", "click", "select", "back", "buy", "Click", "open"]),
              st.one_of(st.text(max_size=30), st.integers(-5, 40).map(str))),
    st.sampled_from(["back", "buy", "click[1]", "click[4]", "click[12]", "select[M]",
                     "<answer>click[4]</answer>", "search[\ud800\x00]", "search[%00%ff&q=1]"]),
)


@settings(max_examples=60)
@given(seed=st.integers(0, 3), actions=st.lists(_ACTIONS, min_size=1, max_size=12))
def test_any_actions_keep_the_env_working(env: WebShopEnv, seed: int, actions: list[str]) -> None:
    env.reset(seed=seed)
    for action in actions:
        observation, reward, terminated, truncated, _ = env.step(action)
        assert observation in env.observation_space and np.isfinite(reward)
        if terminated or truncated:
            env.reset(seed=seed)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_products": 5}, "num_products must be at least 10, got 5"),
    ({"max_page_chars": 10}, "max_page_chars must be at least 200, got 10"),
    ({"backend": "lynx"}, "backend must be 'http' or 'chromium', got 'lynx'"),
])
def test_bad_config_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        WebShopEnv(**kwargs)


def test_unknown_reset_options_are_refused(env: WebShopEnv) -> None:
    with pytest.raises(ConfigError, match=r"Unknown reset options \['level'\]; WebShop takes none"):
        env.reset(options={"level": 1})


def test_made_through_gym_and_registered() -> None:
    env = gym.make(ID)
    observation, _ = env.reset(seed=0)
    assert observation.startswith("Instruction: ")
    env.close()
