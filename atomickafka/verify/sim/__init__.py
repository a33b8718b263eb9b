"""The parts of the one-layer simulator, :class:`~atomickafka.verify.simulator.Simulator`,
which puts them together (import from there).

- ``chaos``: how hostile a run is (:class:`~.chaos.Chaos`, ``CALM``);
- ``result``: what a run produced (:class:`~.result.SimulationResult`) and rule 8's
  replay (:func:`~.result.replayed_deliveries`);
- ``node``: one node's bookkeeping (:class:`~.node.SimNode`: its batch layer, commits,
  snapshots, producer queue, transaction, standby, zombie);
- ``state``: the cluster's state, the base of the simulator's parts
  (:class:`~.state.SimState`: settings, nodes, logs, streams, what is due);
- ``outages``: crashes, restarts, takeovers, pauses, downtime;
- ``writes``: what a node's shell writes, in both delivery modes (``Hold``);
- ``steps``: a node's steps (reads, its zombie, its members record, a snapshot now);
- ``clients``: the clients' sends, the direct lane, back-pressure;
- ``misbehaviour``: the chaos of a step and the hostile records it writes.

Each part builds on those above it (``clients`` on ``state`` only); the simulator,
in :mod:`atomickafka.verify.simulator`, adds the scheduler.
"""
