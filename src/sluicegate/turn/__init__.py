"""The one turn runner: admit → conversation → tool set → model → tool loop → pipeline →
stream or collect → persist → release, for every dialect, with every resource owned once."""
