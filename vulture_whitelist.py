"""Names vulture (pyproject.toml, [tool.vulture]) cannot see used: each is reached by name at run time.
Nothing else belongs here: a name no code reaches is deleted, not listed."""
# ruff: noqa
_ = object()

# Path classes: artifact/registry.py names them as "module:Class" strings; artifact.paths.get_path imports them.
_.ReferenceFullStatePath, _.ReferenceReplayPath, _.ControlledFullStatePaperPath
_.SglangFullStatePaperPath, _.SglangReplaySSMPath, _.VllmFullStatePaperPath, _.VllmPrefixReplayPath
_.FlaFullStatePaperPath

# Hydra: the launcher configs' callback (sweeps/conf/launcher/*.yaml), the main config's (sweeps/conf/config.yaml)
# and their hooks; a suite's `description` (sweeps/conf/suite/*.yaml); the beam_scaling runner's shape enumerator
# ("module:function" in sweeps/runners.py).
_.MergeShardsCallback, _.on_multirun_end, _.HydraFolderCheck, _.on_run_start, _.on_multirun_start
_.description, _.extra_shapes

# transformers' cache protocol (kernels/onela/transformers.py): generate calls these by name.
_.reorder_cache, _.get_seq_length, _.layer_idx

# Python's import protocols (baselines/_load.py): a finder/loader's methods and a placeholder module's attributes.
_.create_module, _.exec_module, _.__package__, _.bases

# pytest: the hook in conftest.py, a module's marks, and fixtures requested by parameter name.
_.pytest_collection_modifyitems, _.pytestmark
_.fake_fi, _.vllm_stand_ins, _.one_thread, _.fake_paths, _.gpu_to_itself, _.interpreter_int_conversion
_.transformers_gdn_in_torch_without_a_gpu      # autouse (tests/conftest.py)
# A fake framework kernel takes the real one's keyword arguments (tests/test_baselines_replayssm.py).
_.output_final_state
