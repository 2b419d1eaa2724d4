"""The webhook service: the public inbound endpoint that fires webhook-scheduled jobs."""
