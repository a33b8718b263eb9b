"""Several hosts on one machine, for fault tests that cut, delay and lose what crosses a
network (issue 39; docs/soak.md, "Network faults").

Theory of operation. A :class:`~atomickafka.netlab.hosts.Lab` is one Linux bridge in the
root network namespace and one network namespace per *host* (each broker, each node
host, each client), joined to the bridge by a veth pair, all on a /24 of
``10.239.0.0/16`` that no other interface of the machine uses. The bridge itself holds
the subnet's ``.1``: the root namespace (the test, its checks, the fault proxy) reaches
every host through it, and nothing in a host has a route anywhere else. Faults are
kernel state, never a mock:

- a host *cut* is its bridge port (the root end of its veth) set down: every packet to
  and from it is lost, and connections stall as over a dead link;
- a host cut from *some* hosts only is a blackhole route to each of them inside its
  namespace (the other hosts still reach it: an asymmetric partition, which is what
  TCP then turns into a stall both ways);
- *delays and losses* need a userspace proxy (the kernel here has no ``tc netem``):
  :mod:`~atomickafka.netlab.proxy` relays every connection a node host makes to a
  broker, and delays, stalls (a lost segment's retransmission) or holds its bytes by
  the connecting host; brokers advertise the proxy's addresses on a listener of their
  own (:mod:`~atomickafka.netlab.brokers`), so that a client that bootstraps through
  the proxy stays behind it;
- processes run inside a host with ``ip netns exec`` and are paused, resumed and killed
  by pid.

Everything a lab creates carries its tag (``akn-<tag>-<host>`` namespaces,
``akn<tag>…`` interfaces) and is listed in a state file under
:data:`~atomickafka.netlab.hosts.STATE_DIR` with the creating process's pid:
:meth:`~atomickafka.netlab.hosts.Lab.close` removes it all (the processes in its
namespaces first), and the next lab that starts removes what a killed run left behind
(its pid is gone). Needs root and ``ip`` (iproute2).

Modules, each owning one thing:

- :mod:`~atomickafka.netlab.hosts` -- the bridge, the namespaces, links cut and healed;
- :mod:`~atomickafka.netlab.proxy` -- the fault proxy (a process of its own) and its client;
- :mod:`~atomickafka.netlab.brokers` -- a three-broker KRaft cluster, one broker per host.
"""

from __future__ import annotations
