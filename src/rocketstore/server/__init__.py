"""The composition root: the one place that puts a running server together.

``BrokerServer`` builds a broker (``rocketstore.broker.BrokerController``: the store, the broker
state, the remoting server and its request processors) and the front ends over it (the gRPC
front end of ``rocketstore.grpc``), and runs their lifecycle in order::

    start      broker (store loaded and recovered, state, remoting server, registration)
               gRPC front end (pop state, server bound)
    shutdown   stop registering with the name servers
               gRPC front end closed (its waiting receives answered, pop progress committed
               into the consumer offsets)
               broker: held pulls answered, remoting server closed, offsets / topics / groups
               persisted, store shut down (flushed, abort file removed)

``run_servers`` runs a name server and brokers in one process until SIGTERM or SIGINT.

Nothing below this package imports it: the broker knows none of its front ends, the gRPC front
end knows the broker only through the protocols of ``rocketstore.broker._services``
(docs/layers.md draws the layers).
"""

from ._broker import BrokerServer as BrokerServer
from ._run import run_servers as run_servers

__all__ = ["BrokerServer", "run_servers"]
