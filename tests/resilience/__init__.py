"""Resilience tests: the daemon against a faulty simulated cluster keeps running, reports
honestly and recovers."""
