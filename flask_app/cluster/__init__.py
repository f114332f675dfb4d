"""Scale-out on Ray: every collection split into shards held by Ray actors.

Imported only when `edgerag serve --ray-address` is given; the default
server never imports Ray.
"""
