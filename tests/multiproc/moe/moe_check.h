/* What the MoE tests (test_moe.c, test_moe_device.c) check alike. */
#ifndef SWY_TEST_MOE_CHECK_H
#define SWY_TEST_MOE_CHECK_H

#include <string.h>

#include "../harness.h"
#include "switchyard/moe.h"

/* Every rank calls plan_create with cfg; all must get `want`, with a
 * message that names `needle`, and no plan. */
static inline int expect_plan(swy_comm_t comm, const swy_moe_config_t *cfg,
                              swy_status_t want, const char *needle)
{
    swy_moe_plan_t plan = NULL;
    swy_status_t st = swy_moe_plan_create(comm, cfg, &plan);
    CHECK_RET(st == want, "plan_create gave %s, expected %s (%s)",
              swy_status_string(st), swy_status_string(want),
              swy_last_error(NULL));
    CHECK_RET(plan == NULL, "plan set on failure");
    CHECK_RET(strstr(swy_last_error(NULL), needle) != NULL,
              "message '%s' does not name '%s'", swy_last_error(NULL),
              needle);
    return 0;
}

#endif
