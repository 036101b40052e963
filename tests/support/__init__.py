"""What the tests share, one copy of each: import ``support.<module>`` (``tests/`` is on the
path of every test module, and the benchmarks that drive test harnesses put it there).

Ports, processes and waits
- ``ports``: ports a test names before its server starts, distinct across pytest-xdist workers.
- ``waits``: polling with generous deadlines, never a fixed sleep.
- ``processes``: reading what a server process prints; the ports a process listens on.

Files RocketMQ wrote
- ``fixtures``: RocketMQ 4.9.8's stores and the official client's transcripts in
  ``tests/fixtures``; ``crash``: killed and power-lost stores of our own.

Servers in the test's process (an event loop on a thread of its own)
- ``remoting``: a loop thread and raw frames; ``broker``: a name server and a broker;
  ``cluster``: a name server and two broker groups (the admin tests); ``grpc_broker``: a broker
  with its gRPC front end; ``acl_env``, ``console_env``: with ACL and with the console;
  ``spark_broker``: brokers for the Spark source; ``controllers``, ``etcd``: RocketMQ 5's
  controller over both backends; ``replicas``: a controller-mode group in one process.

Requests and stand-ins
- ``send_frames``: send requests and the official client's recorded sends; ``transactions``: a
  transactional producer by hand; ``metrics``: the metrics collectors' stand-ins;
  ``group_commit``: a commit log stand-in.

Other programs
- ``interop``, ``rmq4_client``: the official 4.x client in a virtualenv of its own;
  ``grpc_client``, ``grpc_interop_client``: the official 5.x client; ``rocketmq_java``,
  ``rocketmq5``: RocketMQ 4.9.8's and 5.1.4's own Java programs; ``spark_cluster``,
  ``spark_helpers``: a Spark standalone cluster and the Spark tests' expectations;
  ``tier_files``, ``tier_helpers``: tiered stores.
- ``chaos``, ``chaos_cluster``, ``chaos_net``: the fault harness (workload, nemesis, checker).
- ``eos_cluster``, ``eos_spark``, ``eos_failover``: the exactly-once tests' brokers, their
  Spark child programs (killed, or one kept up for the runs that are not), and a
  controller-mode group failed over under a query.
- ``certs``: a CA and certificates for the TLS tests, made with openssl.
- ``disk_full_child``, ``glue_scenario``, ``low_limit_child``: scripts run in child processes.
"""
