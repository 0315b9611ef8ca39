"""The incident's quantities that judgement and the commands share, computed from the
incident model: the load picture (load points, preemptions, usage evidence), the demand
and its growth, the peak, episodes of pressure, spreads of request lengths, the card and
its ledger, rejections and queue caps, the engines' vocabulary. Each takes an Incident
(a rule's context is one) and reads nothing else.
"""
