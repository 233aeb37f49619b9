"""What the samples mean: cost, idle, budgets, phases, phase balance, the recommendation rules
and their book. Pure logic over samples and reader queries; it never writes the store."""
