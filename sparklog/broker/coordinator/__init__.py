"""The broker's coordinators: of consumer groups (group/) and of transactions (transaction/)."""
