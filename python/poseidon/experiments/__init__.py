"""The paper's experiments, runnable by anyone: compute profiles (`poseidon profile`), compute
replay on emulated clusters (`poseidon experiment --emulate`), real-cluster runs
(`poseidon experiment --hostfile`) and a predictor (`poseidon predict`)."""
