"""Text reading shared by every ingester: numbered lines in bounded memory, repairs, decoding."""
