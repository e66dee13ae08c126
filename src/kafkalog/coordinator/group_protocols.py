"""Which assignment protocol a classic group uses: the ones every member supports, and the
one they vote for (Kafka's ClassicGroup.supportsProtocols and selectProtocol).

Why a module of its own: the rule is asked three ways (may a joiner enter, which protocol a
completed join hands out, would a returning static member change it) and is pure: lists of a
member's (protocol name, metadata) in its order of preference in, names out.
Refuses: nothing; an empty group supports whatever a first member brings.
"""

from __future__ import annotations

from collections.abc import Sequence

Protocols = Sequence[tuple[str, bytes]]


def common_protocols(members: Sequence[Protocols], extra: set[str] | None = None) -> list[str]:
    """The protocols every member (and ``extra``, a joiner's names) supports, in the first
    member's order of preference."""
    sets = [{name for name, _ in protocols} for protocols in members]
    if extra is not None:
        sets.append(extra)
    common = set.intersection(*sets) if sets else set()
    order = [name for name, _ in members[0]] if members else sorted(common)
    return [name for name in order if name in common]


def select_protocol(members: Sequence[Protocols]) -> str:
    """Each member votes for its most preferred protocol all members support; the most votes
    win, the first candidate on ties."""
    candidates = common_protocols(members)
    votes = {name: 0 for name in candidates}
    for protocols in members:
        votes[next(name for name, _ in protocols if name in votes)] += 1
    return max(candidates, key=lambda name: votes[name])
