"""Tiered storage (KIP-405): what a partition keeps in remote storage, and how it is found.

Why a package of its own: the remote side of a log sits between the local log (which will read
across the boundary) and the segment files (which are what gets copied); nothing here touches
a socket or a Spark session. Refuses: to know how a particular store moves bytes beyond the
store interface.
"""
