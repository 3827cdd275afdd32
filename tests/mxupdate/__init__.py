"""Tests of mxupdate: MXNet's update kernels against MXNet 1.9.1's operators, and the shares the threads take."""
