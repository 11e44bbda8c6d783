"""A managed node's lifecycle services (lifecycle_msgs), called from the test's node."""

from __future__ import annotations

from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState

from rosharness import service_answers, wait_for

DISCOVERY_S = 20.0


class Lifecycle:
    """A node's get_state / change_state, from the test's node."""

    def __init__(self, ros, node: str, timeout_s: float = DISCOVERY_S) -> None:
        self.get = ros.node.create_client(GetState, f"/{node}/get_state")
        self.change = ros.node.create_client(ChangeState, f"/{node}/change_state")
        self.handshake(timeout_s)

    def handshake(self, timeout_s: float) -> None:
        """Both services answer us: get_state, and a change_state with an unknown label (refused on
        every distro, changes nothing) — a reply sent before its writer matched us would be lost."""
        service_answers(self.get, GetState.Request(), timeout_s, "get_state to answer")
        refused = service_answers(self.change, ChangeState.Request(transition=Transition(label="no such transition")),
                                  timeout_s, "change_state to answer")
        assert not refused.success

    def state(self) -> int:
        return service_answers(self.get, GetState.Request(), 10, "get_state").current_state.id

    def set(self, transition_id: int, timeout_s: float = 120.0) -> bool:
        """Request a transition; its success (configure may load models: a generous bound)."""
        future = self.change.call_async(ChangeState.Request(transition=Transition(id=transition_id)))
        wait_for(future.done, timeout_s, f"change_state {transition_id}")
        return future.result().success
