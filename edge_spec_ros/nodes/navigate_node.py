"""navigate_node: the Navigate action beside the instruction topic (the interface llama_ros and
ros2_nanollm offer: a goal, feedback while it runs, a result, a cancel).

Serves      navigate (edge_spec_ros/action/Navigate): goal = an instruction
Publishes   instruction (std_msgs/String): the goal's instruction; "stop" when a goal is cancelled, or
            ends as FAILED while the drafter would go on deciding; logs "instruction: N
            subscription(s) matched" first and at each change in the subscriptions it has matched
Subscribes  edge_spec/decision (Decision), edge_spec/stats (DecodeStats), edge_spec/action (NavAction):
            relayed as feedback; instruction (std_msgs/String): one from another publisher supersedes
            the goal; edge_spec/bridge_status (BridgeStatus): a verifier lost (the bridge's heartbeat)
            fails the goal with the reason
Publishes   /diagnostics: ``navigate: goal``: OK, the active goal (instruction, decisions so far) or
            idle, and how the last goal ended

A goal does exactly what publishing its instruction does (drafter_node decides, action_node moves,
again after each motion) and follows the decisions: feedback for each decision, its statistics and
its action's start and end; the result is REACHED when the policy decides "stop", STOPPED when the
goal is cancelled or superseded (a new goal, an instruction from elsewhere, shutdown), FAILED on an
invalid action, a failed decision (empty text), ``max_decisions`` decisions without a stop, nobody
listening on ``instruction`` or no progress for ``progress_timeout_s``, with the count of decisions.
Cancelling publishes "stop" on ``instruction`` inside the cancel callback: the action node ends the
motion and publishes zero velocity on receipt, and the drafter ends its cycle.

Executor: one single-threaded executor per process (nodes/lifecycle.py), and nothing here blocks it.
The execute callback is a coroutine (rclpy runs it as a task of the executor) that awaits an rclpy
Future per goal; the subscription, cancel and timer callbacks update the goal (``GoalRun``, no ROS
calls) and complete that Future when it is over. No worker thread, no lock: every callback runs on
the executor's thread. A decision belongs to the goal when it carries the goal's instruction and is
stamped at or after the goal's start; statistics and actions belong through its decision id.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.action.server import ServerGoalHandle
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.task import Future
from std_msgs.msg import String

from edge_spec_ros.action import Navigate
from edge_spec_ros.edge.cycle import is_stop
from edge_spec_ros.msg import BridgeStatus, Decision, DecodeStats as DecodeStatsMsg, NavAction as NavActionMsg
from edge_spec_ros.nodes.diagnostics import OK, Diagnostics, Report
from edge_spec_ros.nodes.compat import publish_matched
from edge_spec_ros.nodes.lifecycle import main_for
from edge_spec_ros.nodes.matched import subscriptions_line
from edge_spec_ros.nodes.params import declare_config, doc
from edge_spec_ros.nodes.ros_link import RELIABLE
from edge_spec_ros.wire.verifier_link import VerifierLost

CHECK_PERIOD_S = 0.5  # how often the progress timeout is checked (steady clock)
MATCH_TIMEOUT_S = 10.0  # a goal waits up to this long for the subscribers of `instruction` to be matched
# (discovery on a loaded computer can take seconds; a message published before matching is lost)
NOBODY_TIMEOUT_S = 2.0  # ... and this long when the graph shows no subscriber but its own
MATCH_POLL_S = 0.05
FEEDBACK_FLUSH_S = 0.1  # between a goal's last feedback and its result (see execute)
EARLY_IDS = 16  # statistics / actions of decisions not seen yet are kept for this many decision ids
Result = Navigate.Result
Feedback = Navigate.Feedback


@dataclass(frozen=True)
class NavigateConfig:
    max_decisions: int = field(default=20, metadata=doc("decisions per goal at most when the goal sets none "
                                                        "(keep it at most the drafter's max_decisions)", 1, 1000))
    progress_timeout_s: float = field(default=60.0, metadata=doc(
        "a goal that sees no decision, statistics or action this long (wall clock) ends as FAILED (s)", 1.0, 3600.0))

    def __post_init__(self) -> None:
        if not 1 <= self.max_decisions <= 1000:
            raise ValueError(f"max_decisions must be in 1..1000, got {self.max_decisions}")
        if not 1.0 <= self.progress_timeout_s <= 3600.0:
            raise ValueError(f"progress_timeout_s must be in 1..3600 s, got {self.progress_timeout_s}")


PARAMETER_CONFIGS = (NavigateConfig,)


def _stamp_ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


class GoalRun:
    """One goal: its decisions, the latest one's statistics and action, and how it ended. Each
    ``on_*`` returns the feedback events it produced (Feedback.DECISION / STATS / ACTION)."""

    def __init__(self, instruction: str, max_decisions: int, since_ns: int, now_s: float) -> None:
        self.instruction = instruction
        self.max_decisions = max_decisions
        self.since_ns = since_ns  # node clock when the instruction went out
        self.sent = False  # the instruction went out
        self.touched_s = now_s  # steady clock of the last sign of progress
        self.ids: list[int] = []
        self.decision = Decision()
        self.stats = DecodeStatsMsg()
        self.action = NavActionMsg()
        self._early: collections.OrderedDict[int, list] = collections.OrderedDict()
        self.outcome: int | None = None
        self.message = ""
        self.stop_robot = False  # the node should publish "stop" when it ends so
        self.done = Future()

    @property
    def over(self) -> bool:
        return self.outcome is not None

    def finish(self, outcome: int, message: str, stop_robot: bool = False) -> bool:
        """End the goal (the first reason wins); True if this call ended it."""
        if self.over:
            return False
        self.outcome, self.message, self.stop_robot = outcome, message, stop_robot
        return True

    def on_decision(self, msg: Decision, now_s: float) -> list[int]:
        if self.over or msg.instruction != self.instruction or _stamp_ns(msg.header.stamp) < self.since_ns \
                or msg.decision in self.ids:
            return []
        self.touched_s = now_s
        self.ids.append(msg.decision)
        self.decision, self.stats, self.action = msg, DecodeStatsMsg(), NavActionMsg()
        events = [Feedback.DECISION]
        if not msg.text:
            self.finish(Result.FAILED, f"decision {msg.decision} failed: no text (the drafter's log says why)")
            return events
        for kind, early in self._early.pop(msg.decision, []):  # arrived before their decision
            events += self.on_stats(early, now_s) if kind == "stats" else self.on_action(early, now_s)
        return events

    def _keep_early(self, kind: str, msg) -> None:
        self._early.setdefault(msg.decision, []).append((kind, msg))
        while len(self._early) > EARLY_IDS:
            self._early.popitem(last=False)

    def on_stats(self, msg: DecodeStatsMsg, now_s: float) -> list[int]:
        if self.over:
            return []
        if msg.decision not in self.ids:
            self._keep_early("stats", msg)
            return []
        self.touched_s = now_s
        if msg.decision == self.ids[-1]:
            self.stats = msg
        return [Feedback.STATS]

    def on_action(self, msg: NavActionMsg, now_s: float) -> list[int]:
        if self.over:
            return []
        if msg.decision not in self.ids:
            self._keep_early("action", msg)
            return []
        self.touched_s = now_s
        if msg.decision != self.ids[-1]:  # the end of an older decision's motion: only reported
            return [Feedback.ACTION]
        self.action = msg
        if msg.status == NavActionMsg.STARTED:
            return [Feedback.ACTION]
        n = len(self.ids)
        if msg.kind == "stop":
            self.finish(Result.REACHED, f"decision {msg.decision} decided to stop after {n} decision(s)")
        elif msg.kind == "invalid":
            self.finish(Result.FAILED, f"decision {msg.decision}: invalid action: {msg.error}")
        elif n >= self.max_decisions:
            self.finish(Result.FAILED, f"{n} decision(s) without a stop (max_decisions {self.max_decisions})",
                        stop_robot=True)
        return [Feedback.ACTION]

    def feedback(self, event: int) -> Feedback:
        return Feedback(event=event, decisions=len(self.ids), decision=self.decision, stats=self.stats,
                        action=self.action)

    def result(self) -> Result:
        return Result(outcome=Result.STOPPED if self.outcome is None else self.outcome, decisions=len(self.ids),
                      message=self.message, last_text=self.decision.text)


class NavigateNode(Node):
    def __init__(self) -> None:
        super().__init__("navigate")
        self.config = declare_config(self, NavigateConfig)
        self.instruction = publish_matched(self, String, "instruction", RELIABLE, on_matched=lambda n: (
            self.get_logger().info(subscriptions_line("instruction", n))))
        self.run: GoalRun | None = None  # the active goal
        self._runs: dict[bytes, GoalRun] = {}  # accepted goals whose execute has not started yet
        self._handles: dict[int, ServerGoalHandle] = {}  # id(run) -> its goal handle
        self._sent: collections.deque[str] = collections.deque(maxlen=100)  # our own instructions, in order
        self.create_subscription(Decision, "edge_spec/decision", self.on_decision, RELIABLE)
        self.create_subscription(DecodeStatsMsg, "edge_spec/stats", self.on_stats, RELIABLE)
        self.create_subscription(NavActionMsg, "edge_spec/action", self.on_action, RELIABLE)
        self.create_subscription(String, "instruction", self.on_instruction, RELIABLE)
        self.create_subscription(BridgeStatus, "edge_spec/bridge_status", self.on_link_status, RELIABLE)
        self.server = ActionServer(self, Navigate, "navigate", execute_callback=self.execute,
                                   goal_callback=self.on_goal, handle_accepted_callback=self.on_accepted,
                                   cancel_callback=self.on_cancel)
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(CHECK_PERIOD_S, self.check_progress, clock=self._steady)
        self._closed = False
        self.last_result = ""  # how the last goal ended
        self.diagnostics = Diagnostics(self)
        self.diagnostics.add("goal", self.report)
        self.get_logger().info("navigate action ready")

    def report(self) -> Report:
        run = self.run
        values = {"active": run is not None, "instruction": run.instruction if run is not None else "",
                  "decisions": len(run.ids) if run is not None else "", "last_result": self.last_result}
        if run is None:
            return Report(OK, "idle", values)
        return Report(OK, f"goal {run.instruction!r}: {len(run.ids)} decision(s)", values)

    # --- the action server -------------------------------------------------------------------------
    def on_goal(self, goal) -> GoalResponse:
        if self._closed or is_stop(goal.instruction):
            self.get_logger().warning(f"goal {goal.instruction!r} rejected: "
                                      f"{'shutting down' if self._closed else 'not an instruction'}")
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def on_accepted(self, handle: ServerGoalHandle) -> None:
        """Supersede the active goal; this one is active from now on and executes."""
        if self.run is not None:
            self._end(self.run, Result.STOPPED, "superseded by a new goal")
        goal = handle.request
        run = GoalRun(goal.instruction.strip(), goal.max_decisions or self.config.max_decisions,
                      self.get_clock().now().nanoseconds, time.monotonic())
        self._handles[id(run)] = handle
        self._runs[bytes(handle.goal_id.uuid)] = run
        self.run = run
        handle.execute()

    async def execute(self, handle: ServerGoalHandle) -> Result:
        run = self._runs.pop(bytes(handle.goal_id.uuid))
        await self._send(run)
        if not run.over:
            await run.done
            # rclpy's action client drops feedback that it takes in the same wait as the result (it
            # forgets the goal's feedback callback on the result): the last feedback goes out first
            await self._sleep(FEEDBACK_FLUSH_S)
        self._handles.pop(id(run), None)
        if run.outcome == Result.REACHED:
            handle.succeed()
        elif handle.is_cancel_requested:
            handle.canceled()
        else:
            handle.abort()
        result = run.result()
        self.last_result = (f"goal {run.instruction!r}: {('reached', 'stopped', 'failed')[result.outcome]} "
                            f"after {result.decisions} decision(s): {result.message}")
        self.get_logger().info(self.last_result)
        return result

    async def _send(self, run: GoalRun) -> None:
        """Publish the goal's instruction once every subscriber the graph knows of is matched (as
        ``ros2 topic pub -w`` waits): a volatile message sent to a subscriber being discovered is lost."""
        topic = self.instruction.topic_name
        start = time.monotonic()
        while not run.over:
            known = self.count_subscribers(topic)  # what the graph knows of, our own subscription included
            if self.instruction.get_subscription_count() >= max(2, known):
                break
            # a subscriber the graph knows of is being matched: wait for it; nobody else at all: not long
            if time.monotonic() - start >= (MATCH_TIMEOUT_S if known >= 2 else NOBODY_TIMEOUT_S):
                break
            await self._sleep(MATCH_POLL_S)
        if run.over:  # cancelled or superseded meanwhile
            return
        if self.instruction.get_subscription_count() < 2:  # our own subscription + at least one node
            self._end(run, Result.FAILED, f"nobody listens on {topic} (are drafter_node and action_node running?)")
            return
        run.since_ns, run.touched_s, run.sent = self.get_clock().now().nanoseconds, time.monotonic(), True
        self._publish(run.instruction)
        self.get_logger().info(f"goal {run.instruction!r}: up to {run.max_decisions} decisions")

    def on_cancel(self, handle: ServerGoalHandle) -> CancelResponse:
        """Stop the robot now (the action node zeroes the velocity on "stop"), then end the goal."""
        run = self.run
        if run is not None and self._handles.get(id(run)) is handle:
            self._publish("stop")
            self._end(run, Result.STOPPED, "cancelled")
        return CancelResponse.ACCEPT

    # --- what the stack reports ----------------------------------------------------------------------
    def on_decision(self, msg: Decision) -> None:
        if self.run is not None:
            self._relay(self.run, self.run.on_decision(msg, time.monotonic()))

    def on_stats(self, msg: DecodeStatsMsg) -> None:
        if self.run is not None:
            self._relay(self.run, self.run.on_stats(msg, time.monotonic()))

    def on_action(self, msg: NavActionMsg) -> None:
        if self.run is not None:
            self._relay(self.run, self.run.on_action(msg, time.monotonic()))

    def on_link_status(self, msg: BridgeStatus) -> None:
        """The bridge's heartbeat lost the verifier (LINK_LOST, code VerifierLost.CODE): the goal fails
        now with the bridge's reason, and the robot is told to stop."""
        if self.run is not None and msg.state == BridgeStatus.LINK_LOST and msg.code == VerifierLost.CODE:
            self._end(self.run, Result.FAILED, msg.message, stop_robot=True)

    def on_instruction(self, msg: String) -> None:
        if self._sent and msg.data == self._sent[0]:  # our own, back from the topic
            self._sent.popleft()
            return
        if self.run is not None:
            self._end(self.run, Result.STOPPED, f"superseded by the instruction {msg.data!r} from another node")

    def check_progress(self) -> None:
        run = self.run
        if run is not None and run.sent and time.monotonic() - run.touched_s > self.config.progress_timeout_s:
            self._end(run, Result.FAILED, f"no decision, statistics or action for {self.config.progress_timeout_s:g} s "
                                          "(is the camera publishing and the verifier reachable?)", stop_robot=True)

    # --- helpers ----------------------------------------------------------------------------------------
    def _relay(self, run: GoalRun, events: list[int]) -> None:
        handle = self._handles.get(id(run))
        if handle is not None:
            for event in events:
                handle.publish_feedback(run.feedback(event))
        if run.over:
            self._end(run, run.outcome, run.message, run.stop_robot)

    def _end(self, run: GoalRun, outcome: int, message: str, stop_robot: bool = False) -> None:
        run.finish(outcome, message, stop_robot)
        if run.stop_robot:
            run.stop_robot = False
            self._publish("stop")
        if self.run is run:
            self.run = None
        if not run.done.done():
            run.done.set_result(True)

    def _sleep(self, seconds: float) -> Future:
        """A Future done after ``seconds`` (steady clock), for the execute coroutine to await."""
        future = Future()

        def fire() -> None:
            self.destroy_timer(timer)
            if not future.done():
                future.set_result(None)

        timer = self.create_timer(seconds, fire, clock=self._steady)
        return future

    def _publish(self, text: str) -> None:
        self._sent.append(text)
        self.instruction.publish(String(data=text))

    def close(self) -> None:
        """Stop the robot if a goal is running and end it (its result goes out while the process flushes)."""
        if self._closed:
            return
        self._closed = True
        if self.run is not None:
            self._end(self.run, Result.STOPPED, "the navigate node shut down", stop_robot=True)

    def destroy_node(self) -> None:
        self.server.destroy()
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    return main_for(NavigateNode, args=args)


if __name__ == "__main__":
    raise SystemExit(main())
