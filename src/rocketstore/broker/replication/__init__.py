"""The broker within its cluster: registration with the name servers (``_outer_api``), a
slave's copy of its master's state (``_slave_sync``), and controller mode: the broker's place in
its group (``_replicas``: registration with the controllers, heartbeats, the role, the lease), its
id files (``_identity``), its SyncStateSet kept with the controller (``_sync_state_set``) and the
requests it answers about it (``_replicas_processor``).
"""
