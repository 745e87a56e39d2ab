// bench/gpu/launch_cost.cu's entry point (the CUDA library's objects link as
// an archive, which a main() inside would not be pulled from).
int LaunchCostMain();
int main() { return LaunchCostMain(); }
