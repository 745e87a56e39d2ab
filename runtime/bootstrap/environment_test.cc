#include "runtime/bootstrap/environment.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace relay {
namespace {

using Vars = std::map<std::string, std::string>;

absl::StatusOr<LaunchEnvironment> Read(const Vars& vars) {
  return ReadLaunchEnvironment(
      [&](absl::string_view name) -> std::optional<std::string> {
        auto it = vars.find(std::string(name));
        if (it == vars.end()) return std::nullopt;
        return it->second;
      });
}

// The error names what is wrong: every string in `mentions` appears.
void ExpectError(const Vars& vars, std::initializer_list<const char*> mentions) {
  absl::StatusOr<LaunchEnvironment> env = Read(vars);
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* m : mentions) {
    EXPECT_NE(env.status().message().find(m), std::string::npos)
        << "'" << m << "' not in: " << env.status().message();
  }
}

TEST(EnvironmentTest, RelayVariables) {
  auto env = Read({{"RELAY_RANK", "2"},
                   {"RELAY_WORLD_SIZE", "4"},
                   {"RELAY_LOCAL_RANK", "2"},
                   {"RELAY_LOCAL_WORLD_SIZE", "4"},
                   {"RELAY_STORE_PORT", "1234"},
                   {"RELAY_TOKEN", "abc"},
                   {"RELAY_TRANSPORT", "ucx"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->launcher, "relay");
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->size, 4);
  EXPECT_EQ(env->local_rank, 2);
  EXPECT_EQ(env->local_size, 4);
  EXPECT_EQ(env->store_host, "127.0.0.1");  // All ranks local.
  EXPECT_EQ(env->store_port, 1234);
  EXPECT_EQ(env->token, "abc");
  EXPECT_EQ(env->transport, "ucx");
  EXPECT_EQ(env->metrics_port, 0);  // No endpoint unless asked for.
}

// Verifies RELAY_METRICS_PORT: offset by the local rank, on loopback unless
// RELAY_METRICS_ADDR says otherwise, refused outside the TCP ports.
TEST(EnvironmentTest, MetricsEndpoint) {
  Vars vars = {{"RANK", "3"},
               {"WORLD_SIZE", "4"},
               {"LOCAL_RANK", "1"},
               {"LOCAL_WORLD_SIZE", "2"},
               {"MASTER_ADDR", "node0"},
               {"RELAY_METRICS_PORT", "9400"}};
  auto env = Read(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->metrics_port, 9401);
  EXPECT_EQ(env->metrics_host, "127.0.0.1");
  vars["RELAY_METRICS_ADDR"] = "10.0.0.7";
  env = Read(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->metrics_host, "10.0.0.7");

  vars["RELAY_METRICS_PORT"] = "65535";  // Plus local rank 1.
  ExpectError(vars, {"RELAY_METRICS_PORT=65535", "local rank 1"});
  vars["RELAY_METRICS_PORT"] = "0";
  ExpectError(vars, {"RELAY_METRICS_PORT"});
  vars["RELAY_METRICS_PORT"] = "many";
  ExpectError(vars, {"RELAY_METRICS_PORT"});
  vars["RELAY_METRICS_PORT"] = "9400";
  vars["RELAY_METRICS_ADDR"] = "";
  ExpectError(vars, {"RELAY_METRICS_ADDR"});
}

TEST(EnvironmentTest, Torchrun) {
  auto env = Read({{"RANK", "5"},
                   {"WORLD_SIZE", "8"},
                   {"LOCAL_RANK", "1"},
                   {"LOCAL_WORLD_SIZE", "4"},
                   {"MASTER_ADDR", "node0"},
                   {"MASTER_PORT", "29400"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->launcher, "torchrun");
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->store_host, "node0");
  EXPECT_EQ(env->store_port, 29400);
  EXPECT_EQ(env->token, "");
}

TEST(EnvironmentTest, OpenMpiAndSlurm) {
  auto mpi = Read({{"OMPI_COMM_WORLD_RANK", "1"},
                   {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  ASSERT_TRUE(mpi.ok()) << mpi.status();
  EXPECT_EQ(mpi->launcher, "Open MPI");
  EXPECT_EQ(mpi->store_port, kDefaultStorePort);

  auto slurm = Read({{"SLURM_PROCID", "3"},
                     {"SLURM_NTASKS", "16"},
                     {"SLURM_LOCALID", "3"},
                     {"MASTER_ADDR", "10.1.2.3"}});
  ASSERT_TRUE(slurm.ok()) << slurm.status();
  EXPECT_EQ(slurm->launcher, "Slurm");
  EXPECT_EQ(slurm->rank, 3);
  EXPECT_EQ(slurm->size, 16);
  EXPECT_EQ(slurm->local_size, 0);
}

TEST(EnvironmentTest, HigherLauncherWinsOverNestedOnes) {
  // torchrun started by srun: Slurm's numbers describe the agent, not us.
  auto env = Read({{"RANK", "6"},
                   {"WORLD_SIZE", "8"},
                   {"SLURM_PROCID", "1"},
                   {"SLURM_NTASKS", "2"},
                   {"MASTER_ADDR", "h"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->launcher, "torchrun");
  EXPECT_EQ(env->rank, 6);
  // relayrun sets relay's and torchrun's, consistently.
  env = Read({{"RELAY_RANK", "1"}, {"RELAY_WORLD_SIZE", "2"},
              {"RANK", "1"}, {"WORLD_SIZE", "2"},
              {"RELAY_STORE_ADDR", "127.0.0.1"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->launcher, "relay");
  // relay's own address wins over MASTER_ADDR.
  env = Read({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"},
              {"RELAY_STORE_ADDR", "b"}, {"MASTER_PORT", "7"},
              {"RELAY_STORE_PORT", "8"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->store_host, "b");
  EXPECT_EQ(env->store_port, 8);
}

TEST(EnvironmentTest, HasLaunchEnvironment) {
  auto has = [](const Vars& vars) {
    return HasLaunchEnvironment(
        [&](absl::string_view name) -> std::optional<std::string> {
          auto it = vars.find(std::string(name));
          if (it == vars.end()) return std::nullopt;
          return it->second;
        });
  };
  EXPECT_FALSE(has({}));
  EXPECT_FALSE(has({{"MASTER_ADDR", "h"}, {"RELAY_TOKEN", "t"}}));
  EXPECT_TRUE(has({{"WORLD_SIZE", "2"}}));
  EXPECT_TRUE(has({{"SLURM_PROCID", "0"}}));
}

TEST(EnvironmentTest, MissingAndContradictoryVariablesAreNamed) {
  ExpectError({}, {"RELAY_RANK", "RANK", "mpirun", "srun"});
  ExpectError({{"RANK", "1"}}, {"WORLD_SIZE"});
  ExpectError({{"WORLD_SIZE", "4"}}, {"RANK"});
  ExpectError({{"RELAY_RANK", "x"}, {"RELAY_WORLD_SIZE", "4"}},
              {"RELAY_RANK", "\"x\""});
  ExpectError({{"RANK", "4"}, {"WORLD_SIZE", "4"}}, {"RANK=4", "WORLD_SIZE=4"});
  ExpectError({{"RANK", "-1"}, {"WORLD_SIZE", "4"}}, {"RANK"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, {"WORLD_SIZE"});
  ExpectError({{"RELAY_RANK", "1"}, {"RELAY_WORLD_SIZE", "2"},
               {"RANK", "0"}, {"WORLD_SIZE", "2"}},
              {"contradictory", "RELAY_RANK=1", "RANK=0"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "3"},
               {"LOCAL_WORLD_SIZE", "2"}},
              {"LOCAL_RANK=3"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "3"}},
              {"LOCAL_WORLD_SIZE=3"});
  // Spans hosts (or might): the address must be given.
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "4"}},
              {"RELAY_STORE_ADDR", "MASTER_ADDR"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}},
              {"MASTER_PORT=70000"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "0"}},
              {"MASTER_PORT"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", ""}},
              {"MASTER_ADDR"});
}

}  // namespace
}  // namespace relay
