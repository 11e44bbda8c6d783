"""The negative control of the DRAGON exactness tests (wire-level and with small models)."""

from __future__ import annotations

import dataclasses

from edge_spec_ros.dragon.aggregation import ROBOT
from edge_spec_ros.dragon.peer import DragonPeer


class StaleDraftsAggregator(DragonPeer):
    """Negative control: an aggregator that neither clears the other side's queued drafts after
    rejecting it nor drops drafts of an old epoch still in flight (it only skips misplaced ones). Both
    sides run it (it is the aggregator in half of the seeds)."""

    def _drop_remote_queue(self):
        pass

    def _on_draft(self, msg):
        if not self.is_aggregator or self.done or msg.position != len(self.tokens) + len(self.remote):
            self.dropped += 1
            return
        self.remote.append(msg)

    def _on_target(self, msg):
        # the buggy aggregator may decide x_t from a stale draft before this side re-drafted t, and its
        # flag for this side describes the stale draft: draft t now and judge the flag here
        while not self.side.queue:
            self.side.draft()
        own = self.side.queue[0].token == msg.token
        field = "accept_robot" if self.name == ROBOT else "accept_cloud"
        super()._on_target(dataclasses.replace(msg, **{field: own}))
