"""Many servers behind one router: which replica a request goes to decides whether its prefix is cached there.

RadixAttention pays only when a request lands where its prefix is cached. A router in front of N replicas picks one
per request; the policies, named as vLLM's router (`vllm-router`) names them:

    round_robin       replica 0, 1, ..., N-1, 0, ...: every tenant's prompt ends up cached on every replica
    random            a replica drawn uniformly
    power_of_two      two replicas drawn, the less loaded one taken
    consistent_hash   a hash of the request's session key (a header such as x-session-id) on a ring of 160 virtual
                      nodes per replica: one session, one replica
    cache_aware       SGLang's rule: an approximate radix tree per replica of the text sent there; the replica with
                      the longest match when it covers more than `cache_threshold` of the request, else the least
                      loaded; shortest queue whenever the loads drift apart

POLICIES is the one list of them: the cluster, the bench, the simulator and the lecture read it.

The modules, each one idea:
    hashing       FurcHash and the ring of virtual nodes that consistent_hash routes by
    approx_tree   the router's guess at what each replica caches: one radix tree over characters, tagged by replica
    policies      the five rules, written from vllm-router's source (`make_policy`)
    simulate      a replay of a workload through a router and a RadixCache per replica (`arrivals`, `simulate`,
                  `sweep`)
"""

POLICIES = ("round_robin", "random", "power_of_two", "consistent_hash", "cache_aware")
