# Times with seconds (an attempt's steps are seconds apart), 24-hour, in the admin and the pages.
DATETIME_FORMAT = "N j, Y, H:i:s"
TIME_FORMAT = "H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
