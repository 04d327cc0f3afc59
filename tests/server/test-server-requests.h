/*
 * test-server-requests.h: the cases of test-server-requests' other file,
 * as its main runs them.
 */
#ifndef MS_TEST_SERVER_REQUESTS_H
#define MS_TEST_SERVER_REQUESTS_H

#include <check.h>

/* chat_message_rules, chat_tool_rules (test-server-requests-rules.c). */
TCase *requests_rules_tcase(void);

#endif
