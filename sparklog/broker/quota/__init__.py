"""Client quotas on the broker: rate sensors (rate.py) and the manager that resolves, meters and throttles
(manager.py). The ZooKeeper layout and the precedence rule live in sparklog.coordination.client_quotas."""
