"""The broker within its cluster: registration with the name servers (``_outer_api``) and a
slave's copy of its master's state (``_slave_sync``).
"""
