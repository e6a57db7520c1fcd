"""FindCoordinator: the broker coordinating each transactional id or consumer group.

v4+ (Kafka 3.0, KIP-699) looks many keys up in one request; below v4 one request per key,
whose answer does not repeat the key (reference captures 08-13)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from kafka.protocol.metadata import FindCoordinatorRequest

from exporter.collect.connection import BrokerConnection, CollectError, UnsupportedApi
from exporter.collect.driver import Handler, Outcome
from exporter.collect.errors import MISSING_FROM_ANSWER, NONE, error_name
from exporter.collect.pollstate import UNSUPPORTED_API_KIND, PollState

GROUP_COORDINATOR_KEY_TYPE = 0
TRANSACTION_COORDINATOR_KEY_TYPE = 1
FIRST_BATCHED_VERSION = 4

Found = list[tuple[str, int, int]]
"""[(key, coordinator node id, error code)]."""


class CoordinatorApiUnsupported(Exception):
    """A broker without FindCoordinator: no coordinator can be found this poll."""


def find_coordinator_request(
    key_type: int, keys: Sequence[str], *, batched_only: bool = False
) -> Callable[[BrokerConnection], Any]:
    """One request for `keys` on v4+; below v4 one key per request (`keys` holds one), or,
    with `batched_only`, `UnsupportedApi` (groups are not looked up one request each)."""

    def build(connection: BrokerConnection) -> Any:
        version = connection.version_for(FindCoordinatorRequest)
        if version >= FIRST_BATCHED_VERSION:
            return FindCoordinatorRequest(
                key_type=key_type, coordinator_keys=list(keys), version=version
            )
        if batched_only:
            raise UnsupportedApi("FindCoordinator v4+ needed to batch group lookups")
        (key,) = keys
        return FindCoordinatorRequest(key=key, key_type=key_type, version=version)

    return build


def parse_find_coordinator(response: Any, requested_key: str | None) -> Found:
    """-> [(key, node_id, error_code)] for either answer shape (below v4: the key asked)."""
    if response.API_VERSION >= FIRST_BATCHED_VERSION:
        return [(c.key, c.node_id, c.error_code) for c in response.coordinators]
    assert requested_key is not None
    return [(requested_key, response.node_id, response.error_code)]


class _FindCoordinator(Handler[str, Found]):
    """Writes each coordinator found into `coordinators`."""

    api = "FindCoordinator"
    key_type = TRANSACTION_COORDINATOR_KEY_TYPE

    def __init__(self, coordinators: dict[str, int]) -> None:
        self.coordinators = coordinators

    def request(self, keys: list[str]) -> Callable[[BrokerConnection], Any]:
        return find_coordinator_request(self.key_type, keys)

    def parse(self, keys: list[str], response: Any) -> tuple[Found, Collection[str]]:
        found = parse_find_coordinator(response, keys[0] if len(keys) == 1 else None)
        return found, {key for key, _, _ in found}

    def handle(
        self, broker_id: int, keys: list[str], answer: Found, state: PollState, *, last: bool
    ) -> Outcome[str]:
        outcome: Outcome[str] = Outcome()
        for key, node_id, code in answer:
            if code == NONE and node_id >= 0:
                self.coordinators[key] = node_id
            else:
                reason = self.reason(code)
                state.error(broker_id, self.api, reason)
                self.not_found(key, reason, outcome)
        self.answered()
        return outcome

    def reason(self, code: int) -> str:
        return error_name(code)

    def not_found(self, key: str, reason: str, outcome: Outcome[str]) -> None:
        """An error answer for `key` (already counted)."""

    def answered(self) -> None:
        """The answer's keys are all taken in."""


class FindTransactionCoordinators(_FindCoordinator):
    """Transaction coordinators, one request per id below v4. A key not found or left out is
    looked up again; a broker without the API makes the coordinator view incomplete."""

    unsupported_name = "FindCoordinator"
    view_needs_it = True
    split_by_version = True

    def batches(self, keys: list[str], connection: BrokerConnection | None) -> list[list[str]]:
        assert connection is not None
        if connection.version_for(FindCoordinatorRequest) >= FIRST_BATCHED_VERSION:
            return [keys]
        return [[key] for key in keys]

    def not_found(self, key: str, reason: str, outcome: Outcome[str]) -> None:
        outcome.retry.append(key)

    def left_out(self, broker_id: int, keys: list[str], state: PollState) -> Outcome[str]:
        return Outcome(retry=sorted(keys))  # asked and not answered: looked up again

    def failed(
        self, broker_id: int, keys: list[str], error: CollectError, state: PollState
    ) -> Outcome[str]:
        if error.kind == UNSUPPORTED_API_KIND:
            raise CoordinatorApiUnsupported() from error
        return Outcome(retry=list(keys))


class FindGroupCoordinators(_FindCoordinator):
    """Group coordinators, v4+ only (one request for all groups; an older broker would take one
    request per group per poll). Whatever is not found makes the groups unknown (`unknown`
    is told why), never "not blocked"."""

    key_type = GROUP_COORDINATOR_KEY_TYPE
    unsupported_name = "FindCoordinator v4"

    def __init__(self, coordinators: dict[str, int], unknown: Callable[[str], None]) -> None:
        super().__init__(coordinators)
        self.unknown = unknown
        self._left_out = False

    def request(self, keys: list[str]) -> Callable[[BrokerConnection], Any]:
        return find_coordinator_request(self.key_type, keys, batched_only=True)

    def reason(self, code: int) -> str:
        return error_name(code) if code != NONE else "COORDINATOR_NOT_AVAILABLE"

    def not_found(self, key: str, reason: str, outcome: Outcome[str]) -> None:
        self.unknown(reason)

    def left_out(self, broker_id: int, keys: list[str], state: PollState) -> Outcome[str]:
        self._left_out = True  # unknown once the groups answered with an error are
        return Outcome()

    def answered(self) -> None:
        if self._left_out:
            self.unknown(MISSING_FROM_ANSWER)

    def failed(
        self, broker_id: int, keys: list[str], error: CollectError, state: PollState
    ) -> Outcome[str]:
        self.unknown(error.kind)
        return Outcome()

    def unrouted(self, keys: list[str]) -> None:
        self.unknown("BROKER_UNREACHABLE")
