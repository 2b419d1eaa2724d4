"""The audit log: who did what to which resource, with before and after snapshots."""
