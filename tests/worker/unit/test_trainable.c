/* argv/env builder: builtin flags, command placeholders, env, errors. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "trainable.h"

static char *base_env[] = {"PATH=/usr/bin:/bin", "OMP_NUM_THREADS=64", "CUDA_VISIBLE_DEVICES=0,1",
                           "HOME=/root", NULL};

static struct trainable_ctx ctx(int resume) {
  struct trainable_ctx c = {
      "/opt/bin/ctune-train", "/w/trials/7", resume, 2, "", 0, 0, base_env, NULL};
  return c;
}

static const char *env_get(char **env, const char *name) {
  size_t n = strlen(name);
  const char *found = NULL;
  int count = 0;
  for (; *env; env++)
    if (!strncmp(*env, name, n) && (*env)[n] == '=') {
      found = *env + n + 1;
      count++;
    }
  ck_assert_int_le(count, 1); /* never two definitions of one variable */
  return found;
}

static int argv_index(char **argv, const char *s) {
  for (int i = 0; argv[i]; i++)
    if (!strcmp(argv[i], s)) return i;
  return -1;
}

START_TEST(builtin_argv_has_contract_flags_and_config_last) {
  cJSON *t = cJSON_Parse(
      "{\"id\": 7, \"config\": {\"lr\": 0.01, \"batch_size\": 16}, \"max_t\": 4,"
      " \"trainable\": {\"type\": \"builtin\", \"model\": \"cnn\", \"dataset\": \"fashion-mnist\","
      " \"data_dir\": \"/d\", \"train_limit\": 512, \"test\": true}}");
  struct trainable_ctx c = ctx(1);
  struct trainable_cmd cmd;
  char err[256];
  ck_assert_int_eq(trainable_build(t, &c, &cmd, err, sizeof err), 0);
  ck_assert_str_eq(cmd.argv[0], "/opt/bin/ctune-train");
  int i;
  ck_assert_int_ge(i = argv_index(cmd.argv, "--model"), 0);
  ck_assert_str_eq(cmd.argv[i + 1], "cnn");
  ck_assert_str_eq(cmd.argv[argv_index(cmd.argv, "--dataset") + 1], "fashion-mnist");
  ck_assert_str_eq(cmd.argv[argv_index(cmd.argv, "--data-dir") + 1], "/d");
  ck_assert_str_eq(cmd.argv[argv_index(cmd.argv, "--train-limit") + 1], "512");
  ck_assert_str_eq(cmd.argv[argv_index(cmd.argv, "--epochs") + 1], "4");
  ck_assert_str_eq(cmd.argv[argv_index(cmd.argv, "--threads") + 1], "2");
  ck_assert_str_eq(cmd.argv[argv_index(cmd.argv, "--checkpoint-dir") + 1], "/w/trials/7");
  ck_assert_int_ge(argv_index(cmd.argv, "--test"), 0);
  ck_assert_int_ge(argv_index(cmd.argv, "--resume"), 0);
  ck_assert_int_lt(argv_index(cmd.argv, "--gpus"), 0);
  i = argv_index(cmd.argv, "--config");
  ck_assert_int_ge(i, 0);
  ck_assert_ptr_null(cmd.argv[i + 2]); /* --config is last */
  cJSON *cfg = cJSON_Parse(cmd.argv[i + 1]);
  ck_assert(cJSON_GetObjectItem(cfg, "batch_size")->valuedouble == 16);
  cJSON_Delete(cfg);
  ck_assert_str_eq(env_get(cmd.env, "OMP_NUM_THREADS"), "2");
  ck_assert_str_eq(env_get(cmd.env, "OPENBLAS_NUM_THREADS"), "2");
  ck_assert_str_eq(env_get(cmd.env, "CUDA_VISIBLE_DEVICES"), ""); /* CPU trial */
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_TRIAL_ID"), "7");
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_RESUME"), "1");
  ck_assert_str_eq(env_get(cmd.env, "HOME"), "/root");
  ck_assert_ptr_null(env_get(cmd.env, "CTUNE_GPU_MEM_LIMIT_MB"));
  ck_assert_str_eq(cmd.cwd, "/w/trials/7");
  trainable_cmd_free(&cmd);
  cJSON_Delete(t);
}
END_TEST

START_TEST(builtin_fractional_gpu_gets_mem_limit) {
  cJSON *t = cJSON_Parse("{\"id\": 2, \"config\": {}, \"trainable\": {\"type\": \"builtin\"}}");
  struct trainable_ctx c = ctx(0);
  c.cuda_visible = "1";
  c.ngpus = 1;
  c.gpu_mem_limit_mb = 4000;
  struct trainable_cmd cmd;
  ck_assert_int_eq(trainable_build(t, &c, &cmd, NULL, 0), 0);
  ck_assert_str_eq(cmd.argv[argv_index(cmd.argv, "--gpu-mem-limit-mb") + 1], "4000");
  ck_assert_str_eq(cmd.argv[argv_index(cmd.argv, "--gpus") + 1], "1");
  ck_assert_int_lt(argv_index(cmd.argv, "--epochs"), 0); /* no max_t, no --epochs */
  ck_assert_int_lt(argv_index(cmd.argv, "--resume"), 0);
  ck_assert_str_eq(env_get(cmd.env, "CUDA_VISIBLE_DEVICES"), "1");
  /* "1" is NVML's index, in PCI bus order: CUDA must number alike */
  ck_assert_str_eq(env_get(cmd.env, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_GPU_MEM_LIMIT_MB"), "4000");
  trainable_cmd_free(&cmd);
  cJSON_Delete(t);
}
END_TEST

START_TEST(command_placeholders_env_and_cwd) {
  cJSON *t = cJSON_Parse(
      "{\"id\": 9, \"config\": {\"lr\": 0.001, \"layers\": 3, \"act\": \"relu\", \"big\": 1e20,"
      " \"flag\": true},"
      " \"trainable\": {\"type\": \"command\", \"argv\": [\"python3\", \"train.py\","
      " \"--lr={lr}\", \"{layers}\", \"{act}-{flag}\", \"{big}\", \"{{literal}}\", \"a{b\", \"echo "
      "{\\\"loss\\\": {lr}}\", \"{}{ x}\"],"
      " \"env\": {\"MY_VAR\": \"x\", \"OMP_NUM_THREADS\": 1, \"CUDA_VISIBLE_DEVICES\": \"0\","
      " \"CTUNE_TRIAL_ID\": \"evil\"}, \"cwd\": \"/tmp/proj\"}}");
  struct trainable_ctx c = ctx(0);
  struct trainable_cmd cmd;
  char err[256] = "";
  ck_assert_int_eq(trainable_build(t, &c, &cmd, err, sizeof err), 0);
  ck_assert_str_eq(cmd.argv[0], "python3");
  ck_assert_str_eq(cmd.argv[2], "--lr=0.001");
  ck_assert_str_eq(cmd.argv[3], "3");
  ck_assert_str_eq(cmd.argv[4], "relu-true");
  ck_assert_str_eq(cmd.argv[5], "1e+20");
  ck_assert_str_eq(cmd.argv[6], "{literal}");
  ck_assert_str_eq(cmd.argv[7], "a{b");
  ck_assert_str_eq(cmd.argv[8], "echo {\"loss\": 0.001}"); /* JSON braces stay */
  ck_assert_str_eq(cmd.argv[9], "{}{ x}");
  ck_assert_ptr_null(cmd.argv[10]);
  ck_assert_str_eq(env_get(cmd.env, "MY_VAR"), "x");
  ck_assert_str_eq(env_get(cmd.env, "OMP_NUM_THREADS"), "1");     /* the user may lower it */
  ck_assert_str_eq(env_get(cmd.env, "CUDA_VISIBLE_DEVICES"), ""); /* but not take a GPU */
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_TRIAL_ID"), "9");
  cJSON *cfg = cJSON_Parse(env_get(cmd.env, "CTUNE_CONFIG"));
  ck_assert_str_eq(cJSON_GetObjectItem(cfg, "act")->valuestring, "relu");
  cJSON_Delete(cfg);
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_CHECKPOINT_DIR"), "/w/trials/7");
  ck_assert_str_eq(cmd.cwd, "/tmp/proj");
  trainable_cmd_free(&cmd);
  cJSON_Delete(t);
}
END_TEST

/* Rule: a gang member gets torchrun's variables from its lease (the user's
 * own MASTER_PORT gives way); a trial of one process gets none. */
START_TEST(gang_member_env) {
  cJSON *t = cJSON_Parse(
      "{\"id\": 9, \"config\": {}, \"trainable\": {\"type\": \"command\", \"argv\": [\"x\"],"
      " \"env\": {\"MASTER_PORT\": \"1\"}}, \"gang\": {\"rank\": 3, \"world_size\": 4,"
      " \"node_rank\": 1, \"num_nodes\": 2, \"local_rank\": 1, \"local_world_size\": 2,"
      " \"master_addr\": \"10.0.0.1\", \"master_port\": 29500}}");
  struct trainable_ctx c = ctx(0);
  struct trainable_cmd cmd;
  char err[256] = "";
  ck_assert_int_eq(trainable_build(t, &c, &cmd, err, sizeof err), 0);
  ck_assert_str_eq(env_get(cmd.env, "RANK"), "3");
  ck_assert_str_eq(env_get(cmd.env, "WORLD_SIZE"), "4");
  ck_assert_str_eq(env_get(cmd.env, "LOCAL_RANK"), "1");
  ck_assert_str_eq(env_get(cmd.env, "LOCAL_WORLD_SIZE"), "2");
  ck_assert_str_eq(env_get(cmd.env, "NODE_RANK"), "1");
  ck_assert_str_eq(env_get(cmd.env, "MASTER_ADDR"), "10.0.0.1");
  ck_assert_str_eq(env_get(cmd.env, "MASTER_PORT"), "29500");
  trainable_cmd_free(&cmd);
  cJSON_DeleteItemFromObject(t, "gang");
  ck_assert_int_eq(trainable_build(t, &c, &cmd, err, sizeof err), 0);
  ck_assert_ptr_null(env_get(cmd.env, "RANK"));
  ck_assert_ptr_null(env_get(cmd.env, "MASTER_ADDR"));
  ck_assert_str_eq(env_get(cmd.env, "MASTER_PORT"), "1");
  trainable_cmd_free(&cmd);
  cJSON_Delete(t);
}
END_TEST

static void expect_error(const char *json, const char *needle) {
  cJSON *t = cJSON_Parse(json);
  ck_assert_ptr_nonnull(t);
  struct trainable_ctx c = ctx(0);
  struct trainable_cmd cmd;
  char err[256] = "";
  ck_assert_int_eq(trainable_build(t, &c, &cmd, err, sizeof err), -EINVAL);
  ck_assert_msg(strstr(err, needle), "error '%s' lacks '%s'", err, needle);
  ck_assert_ptr_null(cmd.argv);
  ck_assert_ptr_null(cmd.env);
  cJSON_Delete(t);
}

START_TEST(bad_trainables_name_the_field) {
  expect_error("{\"id\": 1, \"config\": {}, \"trainable\": {\"type\": \"command\","
               " \"argv\": [\"x\", \"{nope}\"]}}",
               "argv[1]: unknown placeholder {nope}");
  expect_error("{\"id\": 1, \"config\": {}, \"trainable\": {\"type\": \"command\", \"argv\": []}}",
               "trainable.argv");
  expect_error("{\"id\": 1, \"config\": {}, \"trainable\": {\"type\": \"command\","
               " \"argv\": [\"x\", 3]}}",
               "argv[1] must be a string");
  expect_error("{\"id\": 1, \"config\": {}, \"trainable\": {\"type\": \"command\","
               " \"argv\": [\"x\"], \"env\": {\"A\": [1]}}}",
               "trainable.env.A");
  expect_error("{\"id\": 1, \"config\": {}, \"trainable\": {\"type\": \"rocket\"}}",
               "trainable.type");
  expect_error("{\"id\": 1, \"config\": {}, \"trainable\": {\"type\": \"builtin\","
               " \"train_limit\": -4}}",
               "train_limit");
  expect_error("{\"id\": 1, \"config\": 3, \"trainable\": {\"type\": \"builtin\"}}",
               "trial.config");
}
END_TEST

int main(void) {
  Suite *s = suite_create("trainable");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, builtin_argv_has_contract_flags_and_config_last);
  tcase_add_test(tc, builtin_fractional_gpu_gets_mem_limit);
  tcase_add_test(tc, command_placeholders_env_and_cwd);
  tcase_add_test(tc, gang_member_env);
  tcase_add_test(tc, bad_trainables_name_the_field);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
