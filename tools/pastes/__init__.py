"""The collection of real pastes in fixtures/pastes and the table of what kvdiag says about each."""
