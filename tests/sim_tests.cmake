# Simulator tests: exact hand-computed times, formula agreement, reports, CLI.
charm_add_test(sim_engine_test SOURCES sim_engine_test.cpp LIBS charm::sim charm::scheduler LABELS unit TIMEOUT 60)
charm_add_test(event_queue_test SOURCES event_queue_test.cpp LIBS charm::sim LABELS unit TIMEOUT 60)
# The kernel's shape and the stack's costs per block.
charm_add_test(compute_model_test SOURCES compute_model_test.cpp LIBS charm::sim LABELS unit TIMEOUT 60)
charm_add_test(sim_formula_test SOURCES sim_formula_test.cpp LIBS charm::studies charm::scheduler LABELS unit TIMEOUT 600)
charm_add_test(sim_cli_test SOURCES sim_cli_test.cpp LIBS nlohmann_json::nlohmann_json LABELS integration TIMEOUT 300)
charm_add_test(golden_test SOURCES golden_test.cpp LABELS integration TIMEOUT 300)
# Every preset x algorithm x pass x mask: the reported time is the end of the last op and of the critical path.
charm_add_test(sim_consistency_test SOURCES sim_consistency_test.cpp LIBS charm::studies charm::scheduler LABELS unit TIMEOUT 600)
# What bounds a run, the critical-path shares, the memory verdict, and the advisor's ranking.
charm_add_test(sim_explain_test SOURCES sim_explain_test.cpp LIBS charm::studies charm::scheduler LABELS unit TIMEOUT 120)
# The trace layer: measured beside predicted.
charm_add_test(trace_test SOURCES trace_test.cpp LIBS charm::trace LABELS unit TIMEOUT 60)
charm_add_test(sim_quotient_test SOURCES sim_quotient_test.cpp LIBS charm::studies charm::scheduler LABELS unit TIMEOUT 120)
# The Megatron-LM / TransformerEngine / ring-flash-attention counterparts: the table, its copy in the docs, advise's line.
charm_add_test(frameworks_test SOURCES frameworks_test.cpp LIBS charm::studies charm::scheduler LABELS unit TIMEOUT 120)
# Deployments: CP groups of a CP x TP x DP layout at once, on the GPUs the layout gives them.
charm_add_test(layout_test SOURCES layout_test.cpp LIBS charm::studies charm::scheduler LABELS unit TIMEOUT 120)
# Kernel tables reproduce their sources, unknown GPUs are refused or assumed aloud, better hardware is never
# slower (1,000+ random pairs, every algorithm), Ulysses replicates KV heads, an intra-node ring beats a cross-node one.
# Tensor parallelism's collectives and GEMMs in an attention block, advise's runnable rows, sweep's layout axes.
charm_add_test(tensor_parallel_test SOURCES tensor_parallel_test.cpp LIBS charm::studies nlohmann_json::nlohmann_json LABELS unit TIMEOUT 600)
charm_add_test(model_fidelity_test SOURCES model_fidelity_test.cpp LIBS charm::studies charm::scheduler nlohmann_json::nlohmann_json LABELS unit TIMEOUT 600)
# The balanced layout's solver: valid maps, never slower than THD, its answer its map's simulation, one per seed.
charm_add_test(chunk_solver_test SOURCES chunk_solver_test.cpp LIBS charm::studies charm::scheduler LABELS unit TIMEOUT 300 NO_CLI)
