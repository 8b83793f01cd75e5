/* Config from flags and --config JSON: values, order, and errors that name
 * the key and change nothing. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "data.h"

static char err[1024];

static int parse(struct train_config *c, const char *a1, const char *a2, const char *a3,
                 const char *a4) {
  char *argv[6] = {"ctune-train", (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
  int argc = 1;
  while (argc < 5 && argv[argc]) argc++;
  err[0] = 0;
  return config_parse_args(c, argc, argv, err, sizeof(err));
}

START_TEST(defaults_are_the_tutorial) {
  struct train_config c;
  config_defaults(&c);
  ck_assert_int_eq(c.model, MODEL_CNN);
  ck_assert_int_eq(c.batch_size, 64);
  ck_assert_int_eq(c.l1, 120);
  ck_assert_int_eq(c.l2, 84);
  ck_assert(c.lr == 0.01 && c.momentum == 0.9 && c.val_fraction == 0.2);
  ck_assert_int_eq(c.threads, 1);
}
END_TEST

START_TEST(flags_and_json_apply_in_order) {
  struct train_config c;
  config_defaults(&c);
  ck_assert_int_eq(parse(&c, "--lr", "0.5", "--config",
                         "{\"lr\": 0.001, \"batch_size\": 16, \"l1\": 64, "
                         "\"optimizer\": \"adam\", \"drop_last\": true, "
                         "\"model\": \"mlp\", \"dataset\": \"cifar10\"}"),
                   0);
  ck_assert(c.lr == 0.001);
  ck_assert_int_eq(c.batch_size, 16);
  ck_assert_int_eq(c.l1, 64);
  ck_assert_int_eq(c.optimizer, OPTIM_ADAM);
  ck_assert_int_eq(c.drop_last, 1);
  ck_assert_int_eq(c.model, MODEL_MLP);
  ck_assert_int_eq(c.dataset, DATA_CIFAR10);
  ck_assert_int_eq(parse(&c, "--batch-size=8", "--drop-last", "--device", "auto"), 0);
  ck_assert_int_eq(c.batch_size, 8);
  ck_assert_int_eq(c.device, DEVICE_AUTO);
  /* integral floats are integers (Ray hands out 16.0 sometimes) */
  ck_assert_int_eq(parse(&c, "--config", "{\"batch_size\": 32.0}", NULL, NULL), 0);
  ck_assert_int_eq(c.batch_size, 32);
}
END_TEST

#define EXPECT_BAD(a1, a2, a3, a4, needle)                                                         \
  do {                                                                                             \
    struct train_config c, before;                                                                 \
    config_defaults(&c);                                                                           \
    before = c;                                                                                    \
    ck_assert_int_eq(parse(&c, a1, a2, a3, a4), -EINVAL);                                          \
    ck_assert_msg(strstr(err, needle) != NULL, "'%s' lacks '%s'", err, needle);                    \
    ck_assert_msg(strchr(err, '\n') == NULL, "multi-line: %s", err);                               \
    ck_assert(memcmp(&c, &before, sizeof(c)) == 0);                                                \
  } while (0)

START_TEST(errors_name_the_key) {
  EXPECT_BAD("--config", "{\"lr\": 0.1, \"bogus\": 1}", NULL, NULL, "\"bogus\": unknown key");
  EXPECT_BAD("--config", "{\"lr\": \"fast\"}", NULL, NULL, "\"lr\": expected a number");
  EXPECT_BAD("--config", "{\"batch_size\": 0}", NULL, NULL, "\"batch_size\": 0 is out of range");
  EXPECT_BAD("--config", "{\"batch_size\": 2.5}", NULL, NULL,
             "\"batch_size\": expected an integer");
  EXPECT_BAD("--config", "{\"momentum\": 1.0}", NULL, NULL, "\"momentum\"");
  EXPECT_BAD("--config", "{\"val_fraction\": 0}", NULL, NULL, "\"val_fraction\"");
  EXPECT_BAD("--config", "{\"drop_last\": 1}", NULL, NULL, "\"drop_last\": expected true or false");
  EXPECT_BAD("--config", "{\"optimizer\": \"rmsprop\"}", NULL, NULL,
             "\"optimizer\": unknown value");
  EXPECT_BAD("--config", "{\"threads\": 2}", NULL, NULL, "\"threads\": unknown key");
  EXPECT_BAD("--config", "[1, 2]", NULL, NULL, "expected a JSON object");
  EXPECT_BAD("--config", "{\"lr\": ", NULL, NULL, "not valid JSON");
  EXPECT_BAD("--lr", "-1", NULL, NULL, "flag --lr: -1 is out of range");
  EXPECT_BAD("--lr", "abc", NULL, NULL, "flag --lr: expected a number");
  EXPECT_BAD("--epochs", NULL, NULL, NULL, "flag --epochs: missing value");
  EXPECT_BAD("--frobnicate", NULL, NULL, NULL, "flag --frobnicate: unknown flag");
  EXPECT_BAD("--model", "resnet", NULL, NULL, "flag --model: unknown value");
  EXPECT_BAD("--threads", "0", NULL, NULL, "flag --threads");
  EXPECT_BAD("--lr", "0.1", "--l1", "0", "flag --l1");
  EXPECT_BAD("stray", NULL, NULL, NULL, "unexpected argument");
}
END_TEST

/* --gpus 0 (the default) is every device CUDA_VISIBLE_DEVICES shows; the
 * CUDA backend counts them. */
START_TEST(gpus_default_to_all_visible) {
  struct train_config c;
  config_defaults(&c);
  ck_assert_int_eq(c.gpus, 0);
  ck_assert_int_eq(parse(&c, "--gpus", "2", NULL, NULL), 0);
  ck_assert_int_eq(c.gpus, 2);
  ck_assert_int_eq(parse(&c, "--gpus", "0", NULL, NULL), 0);
  ck_assert_int_eq(c.gpus, 0);
  EXPECT_BAD("--gpus", "-1", NULL, NULL, "flag --gpus: -1 is out of range");
  EXPECT_BAD("--gpus", "65", NULL, NULL, "flag --gpus: 65 is out of range");
  ck_assert(strstr(config_usage(), "--gpus N: CUDA devices to use, 0 (the default) = all "
                                   "that CUDA_VISIBLE_DEVICES shows") != NULL);
}
END_TEST

/* The worker's trainable key and a sampled config can pick the device. */
START_TEST(device_is_a_config_key) {
  struct train_config c;
  config_defaults(&c);
  ck_assert_int_eq(c.device, DEVICE_CPU);
  char err[256] = "";
  ck_assert_int_eq(config_apply_json(&c, "{\"device\": \"cuda\"}", err, sizeof(err)), 0);
  ck_assert_int_eq(c.device, DEVICE_CUDA);
  ck_assert_int_eq(config_apply_json(&c, "{\"device\": \"auto\"}", err, sizeof(err)), 0);
  ck_assert_int_eq(c.device, DEVICE_AUTO);
  ck_assert_int_eq(config_apply_json(&c, "{\"device\": \"tpu\"}", err, sizeof(err)), -EINVAL);
  ck_assert_msg(strstr(err, "\"device\"") != NULL, "%s", err);
  ck_assert_int_eq(c.device, DEVICE_AUTO);
}
END_TEST

START_TEST(validate_cross_field) {
  struct train_config c;
  config_defaults(&c);
  c.resume = 1;
  ck_assert_int_eq(config_validate(&c, err, sizeof(err)), -EINVAL);
  ck_assert(strstr(err, "--resume") != NULL);
  c.checkpoint_dir = "/tmp/x";
  ck_assert_int_eq(config_validate(&c, err, sizeof(err)), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("config");
  TCase *tc = tcase_create("config");
  tcase_add_test(tc, defaults_are_the_tutorial);
  tcase_add_test(tc, flags_and_json_apply_in_order);
  tcase_add_test(tc, errors_name_the_key);
  tcase_add_test(tc, gpus_default_to_all_visible);
  tcase_add_test(tc, device_is_a_config_key);
  tcase_add_test(tc, validate_cross_field);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
