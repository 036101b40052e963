"""Recovery: the commit-log scan, the loader that recovers a store at start, the inspector that
verifies one read-only, and the read-only store that recovers in memory what it reads.

Imports: every other room of the store (it runs before them, over them)."""
