"""The composition root: the one place that puts a running server together.

``BrokerServer`` builds every part of a broker and runs their lifecycle: the message store
(its address and HA port resolved from the broker's listen port, ``_addresses.py``), the broker
over it (``rocketstore.broker.BrokerController``: topic configs, groups, offsets, clients, held
pulls, transactions, and the request handlers of its processors), the remoting server serving
those handlers, and the front ends over the broker (the gRPC front end of ``rocketstore.grpc``).
Nothing below builds a store or a server of its own. The order::

    start      store opened (loaded, recovered, started)
               broker state built over it; its handlers served by the remoting server
               broker's own work: periodic tasks, slave sync or transaction checks,
               name-server registration
               gRPC front end (pop state, server bound)
               (a failing step stops what started: the store is shut down and unlocked)
    shutdown   stop registering with the name servers (and copying a master's state)
               gRPC front end closed (its waiting receives answered, pop progress committed
               into the consumer offsets)
               held pulls answered, remoting server closed
               offsets / topics / groups persisted
               store shut down (flushed, abort file removed)

``ControllerServer`` builds RocketMQ 5's controller (its state backend, the controller, the
remoting server on its own port) the same way: a failing start step stops what started.

``run_servers`` runs a name server, a controller and brokers in one process until SIGTERM or
SIGINT.

Nothing below this package imports it: the broker knows none of its front ends, the gRPC front
end knows the broker only through the protocols of ``rocketstore.broker._services``
(docs/layers.md draws the layers).
"""

from ._broker import BrokerServer as BrokerServer
from ._controller import ControllerServer as ControllerServer
from ._run import run_servers as run_servers

__all__ = ["BrokerServer", "ControllerServer", "run_servers"]
