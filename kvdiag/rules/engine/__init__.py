"""The verdict: run the rules, classify, reconcile the three layers, the fleet view."""
