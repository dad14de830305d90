"""The value of a mutation: a dict with the replay information beside it."""

from __future__ import annotations

from typing import Any, Optional


class Written(dict):
    """A mutation's result: the session (or run) as the CLI's ``--json``
    ``data`` prints it, as a plain ``dict``.

    ``replayed`` is ``None`` for a first attempt; for an idempotent replay
    (the same ``idempotency_key`` again) it is ``{"rev": R, "seq": S}``: the
    rev the first attempt left and the seq of the event it wrote, as the
    CLI's envelope carries it (README, "Idempotency").
    """

    __slots__ = ("replayed",)

    def __init__(self, data: dict, replayed: Optional[dict] = None) -> None:
        super().__init__(data)
        self.replayed: Optional[dict[str, Any]] = replayed
