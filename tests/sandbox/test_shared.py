"""The process's shared sandboxes: counted borrows, a lasting hold, and close_all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentgym.sandbox import LocalSandbox
from agentgym.sandbox.shared import borrow_sandbox, close_all, give_back, hold_sandbox, release_hold


@pytest.fixture(autouse=True)
def nothing_shared() -> Iterator[None]:
    close_all()
    yield
    close_all()


def test_borrowers_share_one_sandbox_and_the_last_give_back_closes_it() -> None:
    first = borrow_sandbox("local")
    assert isinstance(first, LocalSandbox) and borrow_sandbox("local") is first
    give_back("local")
    assert borrow_sandbox("local") is first  # one borrower was still there
    give_back("local")
    give_back("local")
    assert borrow_sandbox("local") is not first


def test_a_hold_is_one_borrow_however_often_it_is_taken() -> None:
    held = hold_sandbox("local")
    assert hold_sandbox("local") is held and borrow_sandbox("local") is held
    release_hold("local")
    release_hold("local")  # a second release has nothing left to give back
    assert borrow_sandbox("local") is held  # the borrower still has it open
    give_back("local")
    give_back("local")
    assert hold_sandbox("local") is not held


def test_close_all_forgets_every_borrow_and_hold() -> None:
    held = hold_sandbox("local")
    borrowed = borrow_sandbox("local")
    close_all()
    assert hold_sandbox("local") is not held and borrow_sandbox("local") is not borrowed
