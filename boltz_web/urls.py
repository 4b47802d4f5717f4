from django.contrib import admin
from django.urls import include, path

from attempts.api.routes import api
from attempts.web.signin import refuses_with_429

urlpatterns = [
    # The admin's sign-in, limited like the pages' own (its form is set in attempts/admin.py).
    path("admin/login/", refuses_with_429(admin.site.login), name="admin-login"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("", include("attempts.web.urls")),
]

# Error pages in Boltz's layout, each with a way back (boltz_web/error_pages.py).
handler400 = "boltz_web.error_pages.bad_request"
handler403 = "boltz_web.error_pages.permission_denied"
handler404 = "boltz_web.error_pages.page_not_found"
