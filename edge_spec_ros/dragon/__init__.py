"""Distributed retrieval-augmented generation (DRAGON, Liu et al. 2025, docs/dragon.md), all of it:
the maths (aggregation.py: output aggregation and Algorithm 1; scheduler.py: eqs. 6-8 and the
pipeline simulator; pure, no I/O), the two sides' stores, relevance and document LMs (stores.py,
relevance.py, document_lm.py), one side's Draft Queue and its protocol state (side.py, peer.py), the
messages (wire.py, registered with the project's codec), the robot's side (robot.py), the cloud's
sessions as a kind of decision the verifier server hosts (session.py), and the benchmarks (bench/).

It sits above cloud/ and edge/ (test/packaging/test_layers.py): neither imports it; the server hosts
its sessions through ``cloud/server.SessionKind`` and the codec carries its messages once wire.py has
registered them."""
