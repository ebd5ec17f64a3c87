"""The transport-free API: the JSON-RPC dispatcher and the methods of
sessions, statistics and profiles, with what they need (tokens, publishing,
online counting, presence). Transports hand it bodies and a ``Caller``; it
answers bytes. Feature packages add their methods through ``rpc.Method``.
"""
