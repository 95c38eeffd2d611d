"""The API-serving programs' start-up retry: bounded, only on the errors named, and an
exit that says what failed."""

from __future__ import annotations

import pytest

from kubeclient.startup import retry_startup


def test_retries_the_named_errors_until_it_works() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OSError("not yet")
        return "ok"

    assert retry_startup("prog", "thing", flaky, errors=(OSError,), first=0.01,
                         longest=0.01) == "ok"
    assert len(calls) == 3


def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        retry_startup("prog", "thing", broken, errors=(OSError,), deadline=0.2, first=0.01)
    assert len(calls) == 1


def test_gives_up_at_the_deadline_naming_what_failed() -> None:
    def never() -> None:
        raise OSError("API server down")

    with pytest.raises(SystemExit) as exited:
        retry_startup("virt-api", "certificates", never, errors=(OSError,), deadline=0.1,
                      first=0.02, longest=0.02)
    assert str(exited.value) == "virt-api: certificates failed: API server down"
