# Sweep tests: the CLI end to end (row counts, columns, plots, Ctrl-C) and the engine.
charm_add_test(sweep_test SOURCES sweep_test.cpp LIBS charm_scheduler nlohmann_json::nlohmann_json LABELS integration TIMEOUT 600)
charm_add_test(sweep_engine_test SOURCES sweep_engine_test.cpp LIBS charm::studies LABELS unit TIMEOUT 120)
