"""Thinker replicas behind the gateway: discovery, what each one caches and carries, and the policy picking one."""
